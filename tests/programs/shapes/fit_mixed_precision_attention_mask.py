"""Topic classifier with a hand-written causal Transformer block (decoder-style, last-token pooling),
trained in mixed precision (after tensorflow.org 'Transformer' tutorial's attention and keras.io's
'Text classification with Transformer' + the mixed precision guide). Written by a helper trying NaN Lens as a user.

The mask's -1e9 is -inf in float16; a short window's front rows have every key masked, and their softmax is NaN.
The loss stays finite (the last token is pooled), every gradient but the last layers' is NaN: Keras's
LossScaleOptimizer skips each such step and halves its scale, which fell from 32768 to 1e-3 with no word said.
Fix: a mask constant float16 holds (-1e4, or the dtype's min), or the attention in float32."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)

vocab_size = 500
maxlen = 32
embed_dim = 32
num_heads = 4
ff_dim = 64

# ---- data: windows cut from two kinds of "documents"; the last window of a document can be short
N = 640
seqs, labels = [], []
for i in range(N):
    topic = i % 2
    length = maxlen if rng.random() > 0.01 else int(rng.integers(3, 12))
    lo, hi = (1, 300) if topic == 0 else (200, 500)
    seqs.append(rng.integers(lo, hi, size=length))
    labels.append(topic)
x = keras.utils.pad_sequences(seqs, maxlen=maxlen)  # default padding="pre": the last token is always real
y = np.array(labels, dtype="float32")
print("short windows:", int((x == 0).any(axis=1).sum()))


def scaled_dot_product_attention(q, k, v, allowed):
    matmul_qk = tf.matmul(q, k, transpose_b=True)
    dk = tf.cast(tf.shape(k)[-1], matmul_qk.dtype)
    scaled_attention_logits = matmul_qk / tf.math.sqrt(dk)
    # mask built in float32, cast to the logits' dtype (float16 under mixed precision)
    # CAUSE: -1e9 does not fit in float16 (max 65504): the cast makes it -inf; a padded query row at the front of a
    # pre-padded window has every key masked (causal + padding) -> softmax of all -inf = NaN (in float32: uniform, finite)
    scaled_attention_logits += tf.cast((1.0 - allowed) * -1e9, scaled_attention_logits.dtype)  # ORIGIN
    attention_weights = tf.nn.softmax(scaled_attention_logits, axis=-1)
    return tf.matmul(attention_weights, v)


class CausalSelfAttention(layers.Layer):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_model = d_model
        self.depth = d_model // num_heads
        self.wq = layers.Dense(d_model)
        self.wk = layers.Dense(d_model)
        self.wv = layers.Dense(d_model)
        self.dense = layers.Dense(d_model)

    def split_heads(self, x, batch_size):
        x = tf.reshape(x, (batch_size, -1, self.num_heads, self.depth))
        return tf.transpose(x, perm=[0, 2, 1, 3])

    def call(self, x, key_valid):
        batch_size = tf.shape(x)[0]
        seq_len = tf.shape(x)[1]
        q = self.split_heads(self.wq(x), batch_size)
        k = self.split_heads(self.wk(x), batch_size)
        v = self.split_heads(self.wv(x), batch_size)
        causal = tf.linalg.band_part(tf.ones((seq_len, seq_len)), -1, 0)
        allowed = causal[tf.newaxis, tf.newaxis, :, :] * tf.cast(key_valid, tf.float32)[:, tf.newaxis, tf.newaxis, :]
        out = scaled_dot_product_attention(q, k, v, allowed)
        out = tf.transpose(out, perm=[0, 2, 1, 3])
        out = tf.reshape(out, (batch_size, -1, self.d_model))
        return self.dense(out)


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.att = CausalSelfAttention(embed_dim, num_heads)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs, key_valid, training=False):
        attn_output = self.att(inputs, key_valid)
        attn_output = self.dropout1(attn_output, training=training)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output, training=training)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
        super().__init__(**kwargs)
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        positions = tf.range(start=0, limit=tf.shape(x)[-1], delta=1)
        return self.token_emb(x) + self.pos_emb(positions)


inputs = layers.Input(shape=(maxlen,), dtype="int32")
key_valid = layers.Lambda(lambda t: tf.cast(tf.not_equal(t, 0), "float32"), dtype="float32")(inputs)
h = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)(inputs)
h = TransformerBlock(embed_dim, num_heads, ff_dim)(h, key_valid)
last = layers.Lambda(lambda t: t[:, -1, :])(h)  # last token: always a real one with pre-padding
last = layers.Dropout(0.1)(last)
outputs = layers.Dense(1, activation="sigmoid", dtype="float32")(last)  # keep the output in float32
model = keras.Model(inputs, outputs)

model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=32, epochs=5, validation_split=0.1, callbacks=[NanGuard("captures")])

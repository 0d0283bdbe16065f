"""Neural machine translation with attention (after the tensorflow.org NMT tutorial, TF 2.x version),
on a toy "translation" corpus: the target is the source's words reversed and mapped to another vocabulary; written
by a helper as its users write it. Three corpus lines have an empty source: one row of a batch is all padding, and
the attention's softmax over a -inf mask only is NaN inside the decoder's teacher-forcing loop."""
import time

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

rng = np.random.default_rng(7)
SRC_WORDS = ["ich", "du", "er", "sie", "wir", "haus", "katze", "hund", "geht", "sieht", "ist", "gross", "klein", "rot"]
TGT_WORDS = ["i", "you", "he", "she", "we", "house", "cat", "dog", "goes", "sees", "is", "big", "small", "red"]


def make_corpus(n):
    pairs = []
    for i in range(n):
        k = rng.integers(2, 8)
        idx = rng.integers(0, len(SRC_WORDS), size=k)
        src = " ".join(SRC_WORDS[j] for j in idx)
        tgt = " ".join(TGT_WORDS[j] for j in idx[::-1])
        pairs.append((src, tgt))
    # a few lines of the raw corpus file have an empty source side ("\tyou go")
    for i in rng.integers(0, n, size=3):
        pairs[i] = ("", pairs[i][1])
    return pairs


def preprocess_sentence(w):
    w = w.lower().strip()
    return "<start> " + w + " <end>" if w else ""


pairs = make_corpus(600)
inp_lang_text = [preprocess_sentence(s) for s, _ in pairs]
targ_lang_text = [preprocess_sentence(t) for _, t in pairs]


def tokenize(lang):
    lang_tokenizer = tf.keras.preprocessing.text.Tokenizer(filters="")
    lang_tokenizer.fit_on_texts(lang)
    tensor = lang_tokenizer.texts_to_sequences(lang)
    tensor = tf.keras.preprocessing.sequence.pad_sequences(tensor, padding="post")
    return tensor, lang_tokenizer


input_tensor, inp_lang = tokenize(inp_lang_text)
target_tensor, targ_lang = tokenize(targ_lang_text)
max_length_targ, max_length_inp = target_tensor.shape[1], input_tensor.shape[1]

BUFFER_SIZE = len(input_tensor)
BATCH_SIZE = 32
steps_per_epoch = len(input_tensor) // BATCH_SIZE
embedding_dim = 32
units = 64
vocab_inp_size = len(inp_lang.word_index) + 1
vocab_tar_size = len(targ_lang.word_index) + 1

dataset = tf.data.Dataset.from_tensor_slices((input_tensor, target_tensor)).shuffle(BUFFER_SIZE, seed=3)
dataset = dataset.batch(BATCH_SIZE, drop_remainder=True)


class Encoder(tf.keras.Model):
    def __init__(self, vocab_size, embedding_dim, enc_units, batch_sz):
        super().__init__()
        self.batch_sz = batch_sz
        self.enc_units = enc_units
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = tf.keras.layers.GRU(self.enc_units, return_sequences=True, return_state=True,
                                       recurrent_initializer="glorot_uniform")

    def call(self, x, hidden):
        x = self.embedding(x)
        output, state = self.gru(x, initial_state=hidden)
        return output, state

    def initialize_hidden_state(self):
        return tf.zeros((self.batch_sz, self.enc_units))


class BahdanauAttention(tf.keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.W1 = tf.keras.layers.Dense(units)
        self.W2 = tf.keras.layers.Dense(units)
        self.V = tf.keras.layers.Dense(1)

    def call(self, query, values, mask):
        # query: (batch, hidden) -> (batch, 1, hidden)
        query_with_time_axis = tf.expand_dims(query, 1)
        score = self.V(tf.nn.tanh(self.W1(query_with_time_axis) + self.W2(values)))
        # do not attend to padding positions of the source
        score = tf.where(mask[:, :, tf.newaxis], score, float("-inf"))  # MASK: an all-padding source row is all -inf
        attention_weights = tf.nn.softmax(score, axis=1)  # ORIGIN
        context_vector = attention_weights * values
        context_vector = tf.reduce_sum(context_vector, axis=1)
        return context_vector, attention_weights


class Decoder(tf.keras.Model):
    def __init__(self, vocab_size, embedding_dim, dec_units, batch_sz):
        super().__init__()
        self.batch_sz = batch_sz
        self.dec_units = dec_units
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = tf.keras.layers.GRU(self.dec_units, return_sequences=True, return_state=True,
                                       recurrent_initializer="glorot_uniform")
        self.fc = tf.keras.layers.Dense(vocab_size)
        self.attention = BahdanauAttention(self.dec_units)

    def call(self, x, hidden, enc_output, enc_mask):
        context_vector, attention_weights = self.attention(hidden, enc_output, enc_mask)
        x = self.embedding(x)
        x = tf.concat([tf.expand_dims(context_vector, 1), x], axis=-1)
        output, state = self.gru(x)
        output = tf.reshape(output, (-1, output.shape[2]))
        x = self.fc(output)
        return x, state, attention_weights


encoder = Encoder(vocab_inp_size, embedding_dim, units, BATCH_SIZE)
decoder = Decoder(vocab_tar_size, embedding_dim, units, BATCH_SIZE)

optimizer = tf.keras.optimizers.Adam()
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def loss_function(real, pred):
    mask = tf.math.logical_not(tf.math.equal(real, 0))
    loss_ = loss_object(real, pred)
    mask = tf.cast(mask, dtype=loss_.dtype)
    loss_ *= mask
    return tf.reduce_mean(loss_)


checkpoint = tf.train.Checkpoint(optimizer=optimizer, encoder=encoder, decoder=decoder)


@guard_step(capture_dir="captures", checkpoint=checkpoint)
@tf.function
def train_step(inp, targ, enc_hidden):
    loss = 0
    with tf.GradientTape() as tape:
        enc_output, enc_hidden = encoder(inp, enc_hidden)
        enc_mask = tf.math.not_equal(inp, 0)
        dec_hidden = enc_hidden
        dec_input = tf.expand_dims([targ_lang.word_index["<start>"]] * BATCH_SIZE, 1)
        for t in range(1, targ.shape[1]):
            predictions, dec_hidden, _ = decoder(dec_input, dec_hidden, enc_output, enc_mask)
            loss += loss_function(targ[:, t], predictions)
            dec_input = tf.expand_dims(targ[:, t], 1)
    batch_loss = loss / int(targ.shape[1])
    variables = encoder.trainable_variables + decoder.trainable_variables
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(gradients, variables))
    return batch_loss


EPOCHS = 2
for epoch in range(EPOCHS):
    start = time.time()
    enc_hidden = encoder.initialize_hidden_state()
    total_loss = 0
    for (batch, (inp, targ)) in enumerate(dataset.take(steps_per_epoch)):
        batch_loss = train_step(inp, targ, enc_hidden)
        total_loss += batch_loss
        if batch % 5 == 0:
            print(f"Epoch {epoch+1} Batch {batch} Loss {batch_loss.numpy():.4f}")
    print(f"Epoch {epoch+1} Loss {total_loss/steps_per_epoch:.4f}")
    print(f"Time taken for 1 epoch {time.time()-start:.2f} sec\n")

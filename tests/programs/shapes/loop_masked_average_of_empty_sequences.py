"""Intent classifier over token-id sequences: padded_batch, Embedding(mask_zero=True) + GlobalAveragePooling1D,
custom training loop (tensorflow.org "Writing a training loop from scratch" style).

Utterances whose words were all out of vocabulary come out with 0 tokens: the pooling's masked mean is 0 / 0 for
them. The op is Keras's, made under the loop's ``logits = model(x, training=True)``; the line to read is the
layer's."""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

VOCAB, NUM_CLASSES, BATCH = 300, 4, 32
rng = np.random.default_rng(11)

# token ids per utterance after the tokenizer dropped out-of-vocabulary words
utterances, intents = [], []
for i in range(2400):
    c = int(rng.integers(0, NUM_CLASSES))
    n = int(rng.integers(0, 15))  # utterances whose words are all OOV come out with 0 tokens
    toks = rng.integers(1 + 70 * c, 70 * (c + 1) + 10, size=n)
    utterances.append(toks.astype("int32"))
    intents.append(c)

ds = tf.data.Dataset.from_generator(
    lambda: ((u, i) for u, i in zip(utterances, intents)),
    output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)),
)
train_dataset = ds.shuffle(512, seed=0).padded_batch(BATCH).prefetch(tf.data.AUTOTUNE)

inputs = keras.Input(shape=(None,), dtype="int32")
x = keras.layers.Embedding(VOCAB, 24, mask_zero=True)(inputs)
x = keras.layers.GlobalAveragePooling1D()(x)  # ORIGIN: an all-padding row averages 0 tokens
x = keras.layers.Dense(32, activation="relu")(x)
outputs = keras.layers.Dense(NUM_CLASSES)(x)
model = keras.Model(inputs, outputs)

optimizer = keras.optimizers.Adam(learning_rate=2e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc = keras.metrics.SparseCategoricalAccuracy()


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    train_acc.update_state(y, logits)
    return loss_value


for epoch in range(2):
    for step, (x_batch, y_batch) in enumerate(train_dataset):
        loss_value = train_step(x_batch, y_batch)
        if step % 20 == 0:
            print(f"epoch {epoch} step {step}: loss {float(loss_value):.4f}")
    print(f"epoch {epoch}: acc {float(train_acc.result()):.4f}")
    train_acc.reset_state()

"""Multi-task learning using uncertainty to weigh losses (Kendall, Gal & Cipolla 2018), after the well-known Keras
notebook: a layer owns one learned sigma per task (not a log-variance) and adds the loss; Adam carries the nearly
noise-free task's sigma below 0, read as ``ops.log(sigma[0])``, a slice of the weight (s40f p3)."""
import keras
import numpy as np
from keras import layers, ops

from pyadapter import NanGuard

keras.utils.set_random_seed(7)
np.random.seed(7)

N = 4000
Q = 1
D1 = D2 = 1
X = np.random.randn(N, Q).astype("float32")
w1, b1, w2, b2 = 2.0, 8.0, 3.0, 3.0
Y1 = (X * w1 + b1 + 1.0 * np.random.randn(N, D1)).astype("float32")
Y2 = (X * w2 + b2 + 0.01 * np.random.randn(N, D2)).astype("float32")   # task 2 is nearly noise free


class CustomMultiLossLayer(layers.Layer):
    def __init__(self, nb_outputs=2, **kwargs):
        self.nb_outputs = nb_outputs
        super().__init__(**kwargs)

    def build(self, input_shape=None):
        # one learned standard deviation per task
        self.sigmas = [self.add_weight(name="sigma" + str(i), shape=(1,),
                                       initializer=keras.initializers.Constant(1.0), trainable=True)
                       for i in range(self.nb_outputs)]
        super().build(input_shape)

    def multi_loss(self, ys_true, ys_pred):
        loss = 0
        for y_true, y_pred, sigma in zip(ys_true, ys_pred, self.sigmas):
            loss += ops.sum(ops.square(y_true - y_pred) / (2.0 * sigma[0] ** 2) + ops.log(sigma[0]), -1)  # ORIGIN
        return ops.mean(loss)

    def call(self, inputs):
        ys_true = inputs[:self.nb_outputs]
        ys_pred = inputs[self.nb_outputs:]
        loss = self.multi_loss(ys_true, ys_pred)
        self.add_loss(loss)
        return ops.concatenate(inputs, -1)


def get_prediction_model():
    inp = keras.Input(shape=(Q,))
    y1_pred = layers.Dense(D1)(inp)
    y2_pred = layers.Dense(D2)(inp)
    return keras.Model(inp, [y1_pred, y2_pred])


def get_trainable_model(prediction_model):
    inp = keras.Input(shape=(Q,), name="inp")
    y1_pred, y2_pred = prediction_model(inp)
    y1_true = keras.Input(shape=(D1,), name="y1_true")
    y2_true = keras.Input(shape=(D2,), name="y2_true")
    out = CustomMultiLossLayer(nb_outputs=2)([y1_true, y2_true, y1_pred, y2_pred])
    return keras.Model([inp, y1_true, y2_true], out)


prediction_model = get_prediction_model()
trainable_model = get_trainable_model(prediction_model)
trainable_model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.05), loss=None)
hist = trainable_model.fit([X, Y1, Y2], epochs=30, batch_size=32, verbose=0, callbacks=[NanGuard("captures")])
print([np.exp(w.numpy()) for w in trainable_model.layers[-1].weights])

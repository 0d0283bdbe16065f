"""Neural style transfer after the tensorflow.org tutorial: the image is a ``tf.Variable`` passed to the guarded
``train_step(image)``, which applies the gradients to it; a tiny random-feature extractor stands in for VGG19
(seeded), and the total variation is the isotropic one, a sqrt of squared differences, whose slope is infinite on
the flat background. The replay passed the captured image as a tensor, and ``apply_gradients`` failed
("EagerTensor object has no attribute '_unique_id'")."""
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

tf.keras.utils.set_random_seed(0)

IMG = 48
style_weight = 1e-2
content_weight = 1e4
total_variation_weight = 30


def load_content():
    # a flat-background product photo: white backdrop, one colored object
    img = np.ones((1, IMG, IMG, 3), np.float32)
    img[:, 12:36, 16:32, :] = [0.8, 0.2, 0.1]
    return tf.constant(img)


def load_style():
    rng = np.random.default_rng(1)
    stripes = 0.5 + 0.5 * np.sin(np.arange(IMG)[None, :, None] / 2.0 + rng.uniform(0, 6, (IMG, 1, 3)))
    return tf.constant(stripes[None].astype(np.float32))


content_image = load_content()
style_image = load_style()

content_layers = ["block2_conv1"]
style_layers = ["block1_conv1", "block2_conv1", "block3_conv1"]
num_content_layers = len(content_layers)
num_style_layers = len(style_layers)


def tiny_vgg(layer_names):
    inputs = tf.keras.Input((None, None, 3))
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="block1_conv1")(inputs)
    x = tf.keras.layers.MaxPooling2D(name="block1_pool")(x)
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="block2_conv1")(x)
    x = tf.keras.layers.MaxPooling2D(name="block2_pool")(x)
    x = tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="block3_conv1")(x)
    base = tf.keras.Model(inputs, x)
    base.trainable = False
    outputs = [base.get_layer(name).output for name in layer_names]
    return tf.keras.Model(inputs, outputs)


def gram_matrix(input_tensor):
    result = tf.linalg.einsum("bijc,bijd->bcd", input_tensor, input_tensor)
    input_shape = tf.shape(input_tensor)
    hwc = tf.cast(input_shape[1] * input_shape[2] * input_shape[3], tf.float32)
    return result / hwc


class StyleContentModel(tf.keras.models.Model):
    def __init__(self, style_layers, content_layers):
        super().__init__()
        self.vgg = tiny_vgg(style_layers + content_layers)
        self.style_layers = style_layers
        self.content_layers = content_layers
        self.num_style_layers = len(style_layers)
        self.vgg.trainable = False

    def call(self, inputs):
        inputs = inputs * 255.0
        outputs = self.vgg(inputs)
        style_outputs, content_outputs = (outputs[:self.num_style_layers], outputs[self.num_style_layers:])
        style_outputs = [gram_matrix(style_output) for style_output in style_outputs]
        content_dict = {name: value for name, value in zip(self.content_layers, content_outputs)}
        style_dict = {name: value for name, value in zip(self.style_layers, style_outputs)}
        return {"content": content_dict, "style": style_dict}


extractor = StyleContentModel(style_layers, content_layers)
style_targets = extractor(style_image)["style"]
content_targets = extractor(content_image)["content"]

image = tf.Variable(content_image)
opt = tf.keras.optimizers.Adam(learning_rate=0.02, beta_1=0.99, epsilon=1e-1)


def clip_0_1(image):
    return tf.clip_by_value(image, clip_value_min=0.0, clip_value_max=1.0)


def style_content_loss(outputs):
    style_outputs = outputs["style"]
    content_outputs = outputs["content"]
    style_loss = tf.add_n([tf.reduce_mean((style_outputs[name] - style_targets[name]) ** 2)
                           for name in style_outputs.keys()])
    style_loss *= style_weight / num_style_layers
    content_loss = tf.add_n([tf.reduce_mean((content_outputs[name] - content_targets[name]) ** 2)
                             for name in content_outputs.keys()])
    content_loss *= content_weight / num_content_layers
    return style_loss + content_loss


def total_variation_loss(image):
    # isotropic TV (Rudin-Osher-Fatemi), sqrt of the squared finite differences
    x_deltas = image[:, :-1, :-1, :] - image[:, :-1, 1:, :]
    y_deltas = image[:, :-1, :-1, :] - image[:, 1:, :-1, :]
    return tf.reduce_sum(tf.sqrt(tf.square(x_deltas) + tf.square(y_deltas)))  # ORIGIN


@guard_step(capture_dir="captures", optimizer=opt, checkpoint=tf.train.Checkpoint(image=image, optimizer=opt))
@tf.function()
def train_step(image):
    with tf.GradientTape() as tape:
        outputs = extractor(image)
        loss = style_content_loss(outputs)
        loss += total_variation_weight * total_variation_loss(image)
    grad = tape.gradient(loss, image)
    opt.apply_gradients([(grad, image)])
    image.assign(clip_0_1(image))
    return loss


epochs = 2
steps_per_epoch = 10
step = 0
for n in range(epochs):
    for m in range(steps_per_epoch):
        step += 1
        loss = train_step(image)
        print(".", end="", flush=True)
    print(f"Train step: {step} loss {float(loss):.2f}")

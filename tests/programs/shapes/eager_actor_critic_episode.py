"""keras.io's "Actor Critic Method" shape, written by a helper trying NaN Lens as a user: one plain Python function
(no tf.function) plays a whole episode under the GradientTape, drawing each action with np.random.choice, at module
level. The entropy bonus takes log of the softmax probabilities: raw observations, +100 rewards and a rate of 1e-2
saturate the policy, one probability underflows to 0, and 0 * log(0) is NaN. The step cannot run as a graph (it
hands its tensors to NumPy), and its episode depends on NumPy's global generator."""

import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

from pyadapter import guard_step

seed = 42
gamma = 0.99
max_steps_per_episode = 100
entropy_coef = 0.01
keras.utils.set_random_seed(seed)  # Python's, NumPy's and TensorFlow's generators, and Keras's initializers


class Corridor:
    """Walk from a random cell to the right end of a 30-cell corridor. Observation: (position, steps taken)."""

    length = 30

    def reset(self):
        self.pos = np.random.randint(0, 10)
        self.t = 0
        return np.array([self.pos, self.t], dtype=np.float32)

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        self.t += 1
        done = self.pos >= self.length
        reward = 100.0 if done else -1.0
        return np.array([self.pos, self.t], dtype=np.float32), reward, done


env = Corridor()
num_inputs, num_actions, num_hidden = 2, 2, 128

inputs = layers.Input(shape=(num_inputs,))
common = layers.Dense(num_hidden, activation="relu")(inputs)
action = layers.Dense(num_actions, activation="softmax")(common)
critic = layers.Dense(1)(common)
model = keras.Model(inputs=inputs, outputs=[action, critic])

optimizer = keras.optimizers.Adam(learning_rate=0.01)
huber_loss = keras.losses.Huber()


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
def train_episode():
    state = env.reset()
    action_probs_history, critic_value_history, rewards_history, entropies = [], [], [], []
    with tf.GradientTape() as tape:
        for timestep in range(1, max_steps_per_episode):
            state = tf.expand_dims(tf.convert_to_tensor(state), 0)
            action_probs, critic_value = model(state)
            critic_value_history.append(critic_value[0, 0])
            action = np.random.choice(num_actions, p=np.squeeze(action_probs))
            action_probs_history.append(tf.math.log(action_probs[0, action]))
            entropies.append(-tf.reduce_sum(action_probs * tf.math.log(action_probs)))  # ORIGIN
            state, reward, done = env.step(action)
            rewards_history.append(reward)
            if done:
                break

        returns = []
        discounted_sum = 0
        for r in rewards_history[::-1]:
            discounted_sum = r + gamma * discounted_sum
            returns.insert(0, discounted_sum)

        history = zip(action_probs_history, critic_value_history, returns)
        actor_losses, critic_losses = [], []
        for log_prob, value, ret in history:
            diff = ret - value
            actor_losses.append(-log_prob * diff)
            critic_losses.append(huber_loss(tf.expand_dims(value, 0), tf.expand_dims(ret, 0)))

        loss_value = sum(actor_losses) + sum(critic_losses) - entropy_coef * sum(entropies)
    grads = tape.gradient(loss_value, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return sum(rewards_history), len(rewards_history)


running_reward = 0
for episode_count in range(1, 400):
    episode_reward, length = train_episode()
    running_reward = 0.05 * episode_reward + (1 - 0.05) * running_reward
    if episode_count % 10 == 0:
        print(f"running reward: {running_reward:.2f} at episode {episode_count} (last length {length})")

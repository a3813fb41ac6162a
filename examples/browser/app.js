// The browser example: subscribes with streaming pull, shows each message and acks it, and
// publishes what the form holds. The client bundle is served by the broker.
import { PubSubClient } from '/client/pubsub-client.js';

const params = new URLSearchParams(location.search);
const endpoint = params.get('endpoint') ?? location.origin;
const project = params.get('project') ?? 'demo';
const topic = params.get('topic') ?? 'browser-demo';
const subscription = params.get('subscription') ?? `${topic}-page`;

const $ = (id) => document.getElementById(id);
$('endpoint').textContent = endpoint;
$('topic').textContent = topic;
$('subscription').textContent = subscription;

const client = new PubSubClient({ endpoint, projectId: project });

function log(text) {
  $('log').textContent += `${new Date().toISOString()} ${text}\n`;
}

/** Creates the topic and subscription if they are missing (ALREADY_EXISTS is fine). */
async function ensureResources() {
  const create = async (path, body) => {
    try {
      await client.request('PUT', path, body);
    } catch (error) {
      if (error.status !== 'ALREADY_EXISTS') log(`PUT ${path}: ${error.message}`);
    }
  };
  await create(client.topicName(topic), {});
  await create(client.subscriptionName(subscription), { topic: client.topicName(topic) });
}

function show(message) {
  const item = document.createElement('li');
  item.dataset.messageId = message.messageId;
  item.dataset.status = 'received';
  const status = document.createElement('span');
  status.className = 'status';
  status.textContent = 'received';
  const id = document.createElement('span');
  id.className = 'mono';
  id.textContent = `#${message.messageId}`;
  const text = document.createElement('span');
  text.className = 'text';
  text.textContent = message.text();
  const attributes = document.createElement('span');
  attributes.className = 'mono';
  attributes.textContent = Object.keys(message.attributes).length ? JSON.stringify(message.attributes) : '';
  item.append(status, id, text, attributes);
  $('messages').prepend(item);
  $('count').textContent = String($('messages').children.length);
  return {
    setStatus(value) {
      item.dataset.status = value;
      status.textContent = value;
    },
  };
}

await ensureResources();

/** Every message received, newest last (for the console and tests). */
const messages = [];

const subscriber = client.subscribe(
  subscription,
  async (message) => {
    messages.push(message);
    const view = show(message);
    const response = await message.ackWithResponse();
    view.setStatus(response === 'SUCCESS' ? 'acked' : `ack-${response.toLowerCase()}`);
  },
  {
    onStateChange: (state) => {
      $('state').textContent = state;
      $('state').dataset.state = state;
    },
    onError: (error) => log(`${error.name}: ${error.message}${error.retryable ? ' (reconnecting)' : ''}`),
  },
);

$('publish').addEventListener('submit', async (event) => {
  event.preventDefault();
  const lines = $('lines')
    .value.split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  if (lines.length === 0) return;
  try {
    const ids = await client.publish(
      topic,
      lines.map((data) => ({ data, attributes: { source: 'browser' } })),
    );
    $('published').textContent = `published ${ids.map((id) => `#${id}`).join(' ')}`;
  } catch (error) {
    log(`publish: ${error.message}`);
  }
});

addEventListener('pagehide', () => void subscriber.close());

// For tests and the console.
window.demo = { client, subscriber, messages };

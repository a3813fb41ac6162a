// What the authorization tests of every front end share: principals holding each of Pub/Sub's
// roles on one project (granted by IAM_POLICY_FILE, authenticated by bearer tokens), the roles'
// permissions as Pub/Sub documents them (written out here, not taken from the broker), and fresh
// resources for each case.

import type { RedisClient } from '../../src/redis/client.ts';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Test } from 'tap';
import { buildApp } from '../../src/app.ts';
import { tokenAuthentication } from './auth.ts';
import { tempDir } from './processes.ts';
import { redisTargets, uniquePrefix } from './redis.ts';

export const P = 'authz';

/** Pub/Sub's roles and their permissions (https://cloud.google.com/pubsub/docs/access-control), schemas aside. */
export const ROLE_PERMISSIONS: Record<string, string[]> = {
  'roles/pubsub.admin': [
    'pubsub.topics.attachSubscription',
    'pubsub.topics.create',
    'pubsub.topics.delete',
    'pubsub.topics.detachSubscription',
    'pubsub.topics.get',
    'pubsub.topics.getIamPolicy',
    'pubsub.topics.list',
    'pubsub.topics.publish',
    'pubsub.topics.setIamPolicy',
    'pubsub.topics.update',
    'pubsub.subscriptions.consume',
    'pubsub.subscriptions.create',
    'pubsub.subscriptions.delete',
    'pubsub.subscriptions.get',
    'pubsub.subscriptions.getIamPolicy',
    'pubsub.subscriptions.list',
    'pubsub.subscriptions.setIamPolicy',
    'pubsub.subscriptions.update',
    'pubsub.snapshots.create',
    'pubsub.snapshots.delete',
    'pubsub.snapshots.get',
    'pubsub.snapshots.getIamPolicy',
    'pubsub.snapshots.list',
    'pubsub.snapshots.seek',
    'pubsub.snapshots.setIamPolicy',
    'pubsub.snapshots.update',
    'resourcemanager.projects.getIamPolicy',
    'resourcemanager.projects.setIamPolicy',
  ],
  'roles/pubsub.editor': [
    'pubsub.topics.attachSubscription',
    'pubsub.topics.create',
    'pubsub.topics.delete',
    'pubsub.topics.detachSubscription',
    'pubsub.topics.get',
    'pubsub.topics.list',
    'pubsub.topics.publish',
    'pubsub.topics.update',
    'pubsub.subscriptions.consume',
    'pubsub.subscriptions.create',
    'pubsub.subscriptions.delete',
    'pubsub.subscriptions.get',
    'pubsub.subscriptions.list',
    'pubsub.subscriptions.update',
    'pubsub.snapshots.create',
    'pubsub.snapshots.delete',
    'pubsub.snapshots.get',
    'pubsub.snapshots.list',
    'pubsub.snapshots.seek',
    'pubsub.snapshots.update',
  ],
  'roles/pubsub.publisher': ['pubsub.topics.publish'],
  'roles/pubsub.subscriber': [
    'pubsub.snapshots.seek',
    'pubsub.subscriptions.consume',
    'pubsub.topics.attachSubscription',
  ],
  'roles/pubsub.viewer': [
    'pubsub.snapshots.get',
    'pubsub.snapshots.list',
    'pubsub.subscriptions.get',
    'pubsub.subscriptions.list',
    'pubsub.topics.get',
    'pubsub.topics.list',
  ],
};

/** One principal per role, plus one with no grant on the project at all. */
export const PRINCIPALS = {
  admin: 'roles/pubsub.admin',
  editor: 'roles/pubsub.editor',
  publisher: 'roles/pubsub.publisher',
  subscriber: 'roles/pubsub.subscriber',
  viewer: 'roles/pubsub.viewer',
  nobody: undefined,
} as const;
export type Who = keyof typeof PRINCIPALS;
export const principal = (who: string) => `user:${who}@example.com`;
export const token = (who: string) => `${who}-token-0123456789`;

export type Api = (who: string, method: string, url: string, body?: unknown) => Promise<{ status: number; body: any }>;

/** A broker authenticating the principals above by token, with their roles on project P from IAM_POLICY_FILE. */
export async function authorizingBroker(
  t: Test,
  { grpc = false } = {},
): Promise<{ app: FastifyInstance; api: Api; redis: RedisClient }> {
  const who = [...Object.keys(PRINCIPALS), 'grantee', 'stranger'];
  const policyFile = join(tempDir(t, 'iam'), 'policy.json');
  const bindings = Object.entries(PRINCIPALS)
    .filter(([, role]) => role !== undefined)
    .map(([name, role]) => ({ role, members: [principal(name)] }));
  writeFileSync(policyFile, JSON.stringify({ [P]: { bindings } }));
  const authentication = tokenAuthentication(t, {
    text: who.map((name) => `${principal(name)} ${token(name)}`).join('\n'),
    env: { IAM_POLICY_FILE: policyFile },
  });
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('authz'), authentication, pullWaitMs: 50, grpc });
  if (grpc) await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const api: Api = async (name, method, url, body) => {
    const response = await app.inject({
      method: method as 'GET',
      url,
      headers: {
        authorization: `Bearer ${token(name)}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { payload: body as object }),
    });
    return { status: response.statusCode, body: response.body ? JSON.parse(response.body) : undefined };
  };
  return { app, api, redis };
}

export const topicPath = (id: string) => `/v1/projects/${P}/topics/${id}`;
export const subPath = (id: string) => `/v1/projects/${P}/subscriptions/${id}`;
export const snapshotPath = (id: string) => `/v1/projects/${P}/snapshots/${id}`;
export const topicName = (id: string) => `projects/${P}/topics/${id}`;
export const subName = (id: string) => `projects/${P}/subscriptions/${id}`;
export const snapshotName = (id: string) => `projects/${P}/snapshots/${id}`;

let unique = 0;

/** Fresh resources, made by the admin, for one case: a topic with a message, a subscription holding it leased, a snapshot. */
export async function fixture(api: Api) {
  const n = ++unique;
  const ids = { topic: `topic-${n}`, sub: `sub-${n}`, snapshot: `snap-${n}`, spare: `spare-${n}` };
  const ok = async (method: string, url: string, body?: unknown) => {
    const { status, body: answer } = await api('admin', method, url, body);
    if (status !== 200) throw new Error(`${method} ${url}: ${status} ${JSON.stringify(answer)}`);
    return answer;
  };
  await ok('PUT', topicPath(ids.topic), {});
  await ok('PUT', subPath(ids.sub), { topic: topicName(ids.topic) });
  await ok('POST', `${topicPath(ids.topic)}:publish`, { messages: [{ data: 'aGk=' }] });
  const pulled = await ok('POST', `${subPath(ids.sub)}:pull`, { maxMessages: 1 });
  await ok('PUT', snapshotPath(ids.snapshot), { subscription: subName(ids.sub) });
  const [received] = pulled.receivedMessages;
  return { ...ids, ackId: received.ackId as string, messageId: received.message.messageId as string };
}
export type Fixture = Awaited<ReturnType<typeof fixture>>;

/** Whether the role of `who` grants the permission. */
export const holds = (who: Who, permission: string) => {
  const role = PRINCIPALS[who];
  return role !== undefined && ROLE_PERMISSIONS[role].includes(permission);
};

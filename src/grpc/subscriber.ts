import type { ServerDuplexStream, UntypedServiceImplementation } from '@grpc/grpc-js';
import { resourceName } from '../broker/names.ts';
import { newUid } from '../broker/records.ts';
import type { Snapshot } from '../broker/snapshots.ts';
import { parseBody } from '../schemas/common.ts';
import { createSnapshotBodySchema, updateSnapshotBodySchema } from '../schemas/snapshots.ts';
import {
  acknowledgeBodySchema,
  modifyAckDeadlineBodySchema,
  modifyPushConfigBodySchema,
  pullBodySchema,
  seekBodySchema,
} from '../schemas/subscriptions.ts';
import { formatTimestampUs } from '../broker/durations.ts';
import { type GrpcServices, unary } from './calls.ts';
import { convertPaths, type ProtoTimestamp, timestampFromJson } from './convert.ts';
import {
  pageRequest,
  requestName,
  requestProject,
  subscriptionInput,
  subscriptionProto,
  updateMaskPaths,
} from './resources.ts';
import { SettledInFailedBatch } from './settled-in-failed-batch.ts';
import { streamingPull } from './streaming-pull.ts';

interface SubscriptionRequest {
  subscription?: string;
}
interface SnapshotRequest {
  snapshot?: string;
}

/** The Timestamp-valued fields of a Snapshot. */
const SNAPSHOT_TIMESTAMPS = ['expireTime'];

/** A Snapshot as the broker gives it (expireTime in RFC 3339) in its protobuf form. */
const snapshotProto = (snapshot: Snapshot) =>
  convertPaths<string, ProtoTimestamp>(snapshot, SNAPSHOT_TIMESTAMPS, timestampFromJson);

/** A Snapshot a request gives, with its Timestamps in the JSON form the schemas take. */
const snapshotJson = (snapshot: object | undefined) =>
  convertPaths<ProtoTimestamp, string>(snapshot ?? {}, SNAPSHOT_TIMESTAMPS, (time) =>
    formatTimestampUs(timestampMicros(time)),
  );

/**
 * google.pubsub.v1.Subscriber over the broker's subscription, delivery, snapshot and replay
 * services. proto3 does not send zero values, so a field left out means 0 or false (a nack's
 * ackDeadlineSeconds).
 */
export function subscriberService(services: GrpcServices): UntypedServiceImplementation {
  const { broker } = services;
  const subscription = (request: SubscriptionRequest) =>
    requestName('subscriptions', request.subscription, 'subscription');
  const snapshot = (request: SnapshotRequest) => requestName('snapshots', request.snapshot, 'snapshot');
  const settledInFailedBatch = new SettledInFailedBatch();
  return {
    CreateSubscription: unary(services, async (request: { name?: string }, caller) => {
      const name = requestName('subscriptions', request.name, 'name');
      return subscriptionProto(await broker.subscriptions.create(caller, name, subscriptionInput(request)));
    }),
    GetSubscription: unary(services, async (request: SubscriptionRequest, caller) =>
      subscriptionProto(await broker.subscriptions.get(caller, subscription(request))),
    ),
    UpdateSubscription: unary(
      services,
      async (request: { subscription?: { name?: string }; updateMask?: { paths?: string[] } }, caller) => {
        const name = requestName('subscriptions', request.subscription?.name, 'subscription.name');
        const updated = await broker.subscriptions.update(caller, name, {
          subscription: subscriptionInput(request.subscription),
          updateMask: updateMaskPaths(request.updateMask),
        });
        return subscriptionProto(updated);
      },
    ),
    DeleteSubscription: unary(services, async (request: SubscriptionRequest, caller) => {
      await broker.subscriptions.delete(caller, subscription(request));
      return {};
    }),
    ListSubscriptions: unary(
      services,
      async (request: { project?: string; pageSize?: number; pageToken?: string }, caller) => {
        const page = await broker.subscriptions.list(caller, requestProject(request.project), pageRequest(request));
        return { ...page, subscriptions: page.subscriptions?.map(subscriptionProto) };
      },
    ),
    Pull: unary(
      services,
      async (request: SubscriptionRequest & { maxMessages?: number; returnImmediately?: boolean }, caller) => {
        const name = subscription(request);
        const body = parseBody(
          pullBodySchema,
          { maxMessages: request.maxMessages ?? 0, returnImmediately: request.returnImmediately },
          'pull request',
        );
        // Encoded by the method's serializer (protos.ts).
        return { receivedMessages: await broker.delivery.pull(caller, name, body) };
      },
    ),
    Acknowledge: unary(services, async (request: SubscriptionRequest & { ackIds?: string[] }, caller) => {
      const name = subscription(request);
      const { ackIds } = parseBody(acknowledgeBodySchema, { ackIds: request.ackIds ?? [] }, 'acknowledge request');
      const unsettled = settledInFailedBatch.unsettled('ack', ackIds);
      if (unsettled.length > 0) {
        const outcome = await broker.delivery.acknowledgeEach(caller, name, { ackIds: unsettled });
        settledInFailedBatch.throwFailures(outcome, 'ack');
      }
      return {};
    }),
    ModifyAckDeadline: unary(
      services,
      async (request: SubscriptionRequest & { ackIds?: string[]; ackDeadlineSeconds?: number }, caller) => {
        const name = subscription(request);
        const body = parseBody(
          modifyAckDeadlineBodySchema,
          { ackIds: request.ackIds ?? [], ackDeadlineSeconds: request.ackDeadlineSeconds ?? 0 },
          'modifyAckDeadline request',
        );
        // A deadline extension may simply be applied again; a second nack would fail.
        const kind = body.ackDeadlineSeconds === 0 ? 'nack' : undefined;
        const ackIds = kind ? settledInFailedBatch.unsettled(kind, body.ackIds) : body.ackIds;
        if (ackIds.length > 0) {
          const outcome = await broker.delivery.modifyAckDeadlineEach(caller, name, { ...body, ackIds });
          settledInFailedBatch.throwFailures(outcome, kind);
        }
        return {};
      },
    ),
    StreamingPull: (call: ServerDuplexStream<object, object>) => streamingPull(services, call),
    ModifyPushConfig: unary(services, async (request: SubscriptionRequest & { pushConfig?: object }, caller) => {
      const name = subscription(request);
      const body = parseBody(
        modifyPushConfigBodySchema,
        { pushConfig: request.pushConfig },
        'modifyPushConfig request',
      );
      await broker.subscriptions.modifyPushConfig(caller, name, body);
      return {};
    }),
    GetSnapshot: unary(services, async (request: SnapshotRequest, caller) =>
      snapshotProto(await broker.snapshots.get(caller, snapshot(request))),
    ),
    ListSnapshots: unary(
      services,
      async (request: { project?: string; pageSize?: number; pageToken?: string }, caller) => {
        const page = await broker.snapshots.list(caller, requestProject(request.project), pageRequest(request));
        return { ...page, snapshots: page.snapshots?.map(snapshotProto) };
      },
    ),
    CreateSnapshot: unary(services, async (request: { name?: string; subscription?: string }, caller) => {
      // Without a name, Pub/Sub names the snapshot itself, in the subscription's project.
      const name = request.name
        ? requestName('snapshots', request.name, 'name')
        : resourceName(
            'snapshots',
            requestName('subscriptions', request.subscription, 'subscription').project,
            `snapshot-${newUid()}`,
          );
      const body = parseBody(createSnapshotBodySchema, request, 'request');
      return snapshotProto(await broker.snapshots.create(caller, name, body));
    }),
    UpdateSnapshot: unary(
      services,
      async (request: { snapshot?: { name?: string }; updateMask?: { paths?: string[] } }, caller) => {
        const name = requestName('snapshots', request.snapshot?.name, 'snapshot.name');
        const body = parseBody(updateSnapshotBodySchema, { snapshot: snapshotJson(request.snapshot) }, 'request');
        const updated = await broker.snapshots.update(caller, name, {
          snapshot: body.snapshot,
          updateMask: updateMaskPaths(request.updateMask),
        });
        return snapshotProto(updated);
      },
    ),
    DeleteSnapshot: unary(services, async (request: SnapshotRequest, caller) => {
      await broker.snapshots.delete(caller, snapshot(request));
      return {};
    }),
    Seek: unary(
      services,
      async (
        request: SubscriptionRequest & { time?: { seconds?: string; nanos?: number } | null; snapshot?: string },
        caller,
      ) => {
        const name = subscription(request);
        const time = request.time ? formatTimestampUs(timestampMicros(request.time)) : undefined;
        const body = parseBody(seekBodySchema, { time, snapshot: request.snapshot || undefined }, 'seek request');
        await broker.replay.seek(caller, name, body);
        return {};
      },
    ),
  };
}

/** A google.protobuf.Timestamp (seconds as a string: the loader's longs) in microseconds. */
function timestampMicros(time: ProtoTimestamp): number {
  return Number(time.seconds ?? 0) * 1_000_000 + Math.floor((time.nanos ?? 0) / 1000);
}

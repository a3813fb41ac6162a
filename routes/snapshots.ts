import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkProject, resourceName } from '../src/broker/names.ts';
import type { PageRequest } from '../src/broker/pagination.ts';
import { parseBody } from '../src/schemas/common.ts';
import { createSnapshotBodySchema, updateSnapshotBodySchema } from '../src/schemas/snapshots.ts';
import { parseUpdateMask } from '../src/schemas/update-mask.ts';
import { httpCaller } from './caller.ts';
import { SNAPSHOT_PATH, TOPIC_PATH, type RouteOptions } from './options.ts';

interface SnapshotParams {
  project: string;
  snapshot: string;
}

export async function snapshotRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  const snapshotName = (params: SnapshotParams) => resourceName('snapshots', params.project, params.snapshot);

  const caller = (request: FastifyRequest) => httpCaller(broker, 'rest', request);

  app.put<{ Params: SnapshotParams }>(SNAPSHOT_PATH, (request) => {
    const name = snapshotName(request.params);
    return broker.snapshots.create(
      caller(request),
      name,
      parseBody(createSnapshotBodySchema, request.body ?? {}, 'request'),
    );
  });
  app.get<{ Params: SnapshotParams }>(SNAPSHOT_PATH, (request) =>
    broker.snapshots.get(caller(request), snapshotName(request.params)),
  );
  app.patch<{ Params: SnapshotParams }>(SNAPSHOT_PATH, (request) => {
    const name = snapshotName(request.params);
    const { snapshot, updateMask } = parseBody(updateSnapshotBodySchema, request.body, 'request');
    return broker.snapshots.update(caller(request), name, { snapshot, updateMask: parseUpdateMask(updateMask) });
  });
  app.delete<{ Params: SnapshotParams }>(SNAPSHOT_PATH, async (request) => {
    await broker.snapshots.delete(caller(request), snapshotName(request.params));
    return {};
  });
  app.get<{ Params: { project: string }; Querystring: PageRequest }>('/v1/projects/:project/snapshots', (request) =>
    broker.snapshots.list(caller(request), checkProject(request.params.project), request.query),
  );
  app.get<{ Params: { project: string; topic: string }; Querystring: PageRequest }>(
    `${TOPIC_PATH}/snapshots`,
    (request) =>
      broker.snapshots.listOfTopic(
        caller(request),
        resourceName('topics', request.params.project, request.params.topic),
        request.query,
      ),
  );
}

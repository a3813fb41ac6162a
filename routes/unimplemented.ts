import type { FastifyInstance, HTTPMethods } from 'fastify';
import { ApiError } from '../src/errors.ts';
import { PROJECT_PATH } from './options.ts';

const SCHEMA_PATH = `${PROJECT_PATH}/schemas/:schema([^:/]+)`;

/** The Pub/Sub REST methods this broker does not implement yet: [HTTP method, route URL, RPC]. */
const UNIMPLEMENTED_METHODS: [HTTPMethods, string, string][] = [
  ['POST', `${PROJECT_PATH}/schemas`, 'SchemaService.CreateSchema'],
  ['GET', `${PROJECT_PATH}/schemas`, 'SchemaService.ListSchemas'],
  ['POST', `${PROJECT_PATH}/schemas::validate`, 'SchemaService.ValidateSchema'],
  ['POST', `${PROJECT_PATH}/schemas::validateMessage`, 'SchemaService.ValidateMessage'],
  ['GET', SCHEMA_PATH, 'SchemaService.GetSchema'],
  ['DELETE', SCHEMA_PATH, 'SchemaService.DeleteSchema'],
  ['GET', `${SCHEMA_PATH}::listRevisions`, 'SchemaService.ListSchemaRevisions'],
  ['POST', `${SCHEMA_PATH}::commit`, 'SchemaService.CommitSchema'],
  ['POST', `${SCHEMA_PATH}::rollback`, 'SchemaService.RollbackSchema'],
  ['DELETE', `${SCHEMA_PATH}::deleteRevision`, 'SchemaService.DeleteSchemaRevision'],
  // Schemas have IAM policies in Pub/Sub; the broker has no schemas.
  ['GET', `${SCHEMA_PATH}::getIamPolicy`, 'IAMPolicy.GetIamPolicy'],
  ['POST', `${SCHEMA_PATH}::getIamPolicy`, 'IAMPolicy.GetIamPolicy'],
  ['POST', `${SCHEMA_PATH}::setIamPolicy`, 'IAMPolicy.SetIamPolicy'],
  ['POST', `${SCHEMA_PATH}::testIamPermissions`, 'IAMPolicy.TestIamPermissions'],
];

/** A route URL as Pub/Sub's reference spells the path: `/v1/projects/{project}/topics/{topic}:publish`. */
function pathTemplate(url: string): string {
  const [path, verb] = url.split('::');
  return path.replace(/:(\w+)(\([^)]*\))?/g, '{$1}') + (verb === undefined ? '' : `:${verb}`);
}

/**
 * Pub/Sub methods the broker does not implement yet answer 501 UNIMPLEMENTED, naming the method:
 * without these routes they would answer 404 NOT_FOUND, which official clients report as a
 * missing topic or subscription.
 */
export async function unimplementedRoutes(app: FastifyInstance): Promise<void> {
  for (const [method, url, rpc] of UNIMPLEMENTED_METHODS) {
    const message = `The method ${rpc} (${method} ${pathTemplate(url)}) is not implemented by this broker yet.`;
    app.route({
      method,
      url,
      handler: async () => {
        throw new ApiError('UNIMPLEMENTED', message);
      },
    });
  }
}

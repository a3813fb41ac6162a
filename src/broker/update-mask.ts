import { invalidArgument } from '../errors.ts';

/** A FieldMask in JSON is one comma-separated string; accepts lowerCamelCase and snake_case paths. */
export function parseUpdateMask(mask: string | undefined, request: string): string[] {
  const paths = (mask ?? '')
    .split(',')
    .map((path) => path.trim())
    .filter(Boolean)
    .map((path) => path.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase()));
  if (paths.length === 0) throw invalidArgument(`The ${request} must have a non-empty update_mask.`);
  return paths;
}

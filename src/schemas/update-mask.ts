/**
 * A FieldMask in JSON is one comma-separated string; accepts lowerCamelCase and snake_case paths
 * and gives them as field names (lowerCamelCase). The services check them (fields.ts).
 */
export function parseUpdateMask(mask: string | undefined): string[] {
  return (mask ?? '')
    .split(',')
    .map((path) => path.trim())
    .filter(Boolean)
    .map((path) => path.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase()));
}

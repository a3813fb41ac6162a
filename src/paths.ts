import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Files the broker reads at run time (Lua scripts, openapi.yaml, the browser example) are found
 * from the package root, so that the same code works from the TypeScript sources (tests, tsx)
 * and from the bundle that `npm start` runs (dist/server.mjs).
 */
function findPackageRoot(start: string): string {
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${start}`);
  }
}

export const PACKAGE_ROOT = findPackageRoot(dirname(fileURLToPath(import.meta.url)));

export const packagePath = (...parts: string[]) => join(PACKAGE_ROOT, ...parts);

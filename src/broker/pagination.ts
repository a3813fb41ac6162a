import { invalidArgument } from '../errors.ts';

/**
 * Lexicographic pagination over a name index (a ZSET with score 0). Page tokens are the last
 * name of the previous page, base64url-encoded: opaque to clients, stable under inserts.
 */
export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

export interface PageRequest {
  pageSize?: string;
  pageToken?: string;
}

export interface Page {
  names: string[];
  nextPageToken?: string;
}

export function parsePageSize(raw: string | undefined): number {
  if (raw === undefined || raw === '' || raw === '0') return DEFAULT_PAGE_SIZE;
  if (!/^\d+$/.test(raw)) throw invalidArgument(`Invalid pageSize: "${raw}" is not a non-negative integer.`);
  return Math.min(Number(raw), MAX_PAGE_SIZE);
}

/** Reads one page of the names in [prefix, prefix + '\xff') from a ZSET index. */
export async function readNamePage(
  zrangebylex: (min: string, max: string, count: number) => Promise<string[]>,
  prefix: string,
  request: PageRequest,
): Promise<Page> {
  const pageSize = parsePageSize(request.pageSize);
  let start = `[${prefix}`;
  if (request.pageToken) {
    const last = Buffer.from(request.pageToken, 'base64url').toString('utf8');
    if (!last.startsWith(prefix) || Buffer.from(last).toString('base64url') !== request.pageToken) {
      throw invalidArgument('Invalid pageToken.');
    }
    start = `(${last}`;
  }
  const names = await zrangebylex(start, `(${prefix}\xff`, pageSize + 1);
  if (names.length <= pageSize) return { names };
  const page = names.slice(0, pageSize);
  return { names: page, nextPageToken: Buffer.from(page[page.length - 1]).toString('base64url') };
}

import type { RedisClient } from '../redis/client.ts';
import { BLOCK_FIELD_DIGITS, type TopicKeys } from '../redis/keys.ts';

/**
 * The stored bodies of messages `seqs` (null where gone), in that order: one HMGET per run of
 * seqs in one body block (a pull's messages come in runs from few blocks), pipelined when there
 * are several; on Redis Cluster all on the topic's slot. A seq's digits name its block and field
 * (keys.ts).
 */
export async function readBodies(redis: RedisClient, data: TopicKeys, seqs: string[]): Promise<(Buffer | null)[]> {
  const runs: { block: string; fields: string[] }[] = [];
  for (const seq of seqs) {
    const block = seq.slice(0, -BLOCK_FIELD_DIGITS);
    let run = runs.at(-1);
    if (run?.block !== block) runs.push((run = { block, fields: [] }));
    run.fields.push(seq.slice(-BLOCK_FIELD_DIGITS));
  }
  // One run (most pulls of a stream): one HMGET, without the cost of an ioredis pipeline.
  if (runs.length === 1) return redis.hmgetBuffer(data.bodyBlock(runs[0].block), ...runs[0].fields);
  const pipeline = redis.pipeline();
  for (const { block, fields } of runs) pipeline.hmgetBuffer(data.bodyBlock(block), ...fields);
  // exec() answers null only for a transaction whose WATCH failed; this is a plain pipeline.
  return (await pipeline.exec())!.flatMap(([error, values]) => {
    if (error) throw error;
    return values as (Buffer | null)[];
  });
}

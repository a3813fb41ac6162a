import type { Cluster, Redis } from 'ioredis';

/** A connection to a standalone Redis or to a Redis Cluster: the broker works with either. */
export type RedisClient = Redis | Cluster;

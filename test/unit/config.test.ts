// The environment configuration: defaults, and the region settings (REGION, REGIONS).

import t from 'tap';
import { ConfigError, loadConfig } from '../../src/config.ts';

t.test('without regions: defaults for a first run', async (t) => {
  const config = loadConfig({});
  t.equal(config.PORT, 8085);
  t.equal(config.REGION, undefined);
  t.equal(config.REGIONS, undefined);
});

t.test('REGIONS lists standalone and cluster regions', async (t) => {
  const config = loadConfig({
    REGION: 'us-east1',
    REGIONS:
      'us-east1=redis://10.0.0.1:6379, europe-west1=cluster://10.1.0.1:7000+10.1.0.2:7000,asia-east1=rediss://h:6380',
  });
  t.same(config.REGIONS, [
    { name: 'us-east1', url: 'redis://10.0.0.1:6379' },
    {
      name: 'europe-west1',
      clusterNodes: [
        { host: '10.1.0.1', port: 7000 },
        { host: '10.1.0.2', port: 7000 },
      ],
    },
    { name: 'asia-east1', url: 'rediss://h:6380' },
  ]);
  t.same(
    loadConfig({ REGION: 'us-east1', REGIONS: 'us-east1=redis://10.0.0.1:6379', REDIS_URL: 'redis://10.0.0.1:6379' })
      .REGION,
    'us-east1',
    'REDIS_URL may name the same server',
  );
});

t.test('bad region settings are refused with a message that says what is wrong', async (t) => {
  const refused: [Record<string, string>, RegExp][] = [
    [{ REGION: 'a1' }, /Set both REGION .* and REGIONS/],
    [{ REGIONS: 'a1=redis://h:1' }, /Set both REGION/],
    [{ REGION: 'b1', REGIONS: 'a1=redis://h:1' }, /REGION b1 is not listed in REGIONS \(a1\)/],
    [{ REGION: 'a1', REGIONS: 'a1=redis://h:1,a1=redis://h:2' }, /region a1 is listed twice/],
    [{ REGION: 'a1', REGIONS: 'A1=redis://h:1' }, /"A1=redis:\/\/h:1" is not name=redis:\/\/host:port/],
    [{ REGION: 'a1', REGIONS: 'a1=http://h:1' }, /region a1: "http:\/\/h:1" is not a redis:\/\/ URL/],
    [{ REGION: 'a1', REGIONS: 'a1=cluster://h' }, /region a1: "cluster:\/\/h" is not cluster:\/\/host:port\+host:port/],
    [
      { REGION: 'a1', REGIONS: 'a1=redis://h:1', REDIS_URL: 'redis://other:1' },
      /REDIS_URL \(redis:\/\/other:1\) is not region a1's Redis/,
    ],
    [{ REGION: 'a1', REGIONS: 'a1=redis://h:1', REDIS_CLUSTER_NODES: 'h:1' }, /not REDIS_CLUSTER_NODES/],
    [{ REGION: 'Bad_Name', REGIONS: 'a1=redis://h:1' }, /REGION: is not a region name/],
  ];
  for (const [env, message] of refused) {
    const error = (() => {
      try {
        loadConfig(env);
      } catch (thrown) {
        return thrown;
      }
    })();
    t.ok(error instanceof ConfigError, `${JSON.stringify(env)} is refused`);
    t.match((error as Error | undefined)?.message, message);
  }
});

t.test('PUSH_ENDPOINT_HOSTS: kept as endpoints are compared, a port refused', async (t) => {
  t.equal(loadConfig({}).PUSH_ENDPOINT_HOSTS, '*');
  t.same(loadConfig({ PUSH_ENDPOINT_HOSTS: ' Hooks.Example.com, .internal ,[::1]' }).PUSH_ENDPOINT_HOSTS, [
    'hooks.example.com',
    '.internal',
    '::1',
  ]);
  t.throws(() => loadConfig({ PUSH_ENDPOINT_HOSTS: 'localhost:8080' }), /"localhost:8080" names a port/);
  t.throws(() => loadConfig({ PUSH_ENDPOINT_HOSTS: 'a b' }), /"a b" is not a host name/);
  t.throws(() => loadConfig({ PUSH_ENDPOINT_HOSTS: ' , ' }), /lists no host/);
});

t.test('authentication settings: the fail-safe beyond loopback, and the open paths', async (t) => {
  for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1'])
    t.equal(loadConfig({ HOST: host }).HOST, host, `${host} is loopback: no authentication needed`);
  for (const host of ['0.0.0.0', '::', '10.0.0.5', 'broker.example.com', '128.0.0.1']) {
    t.throws(
      () => loadConfig({ HOST: host }),
      {
        name: 'Error',
        message: new RegExp(
          `^Refusing to listen on ${host.replaceAll('.', '\\.')} without authentication.*AUTH_TOKENS_FILE.*ALLOW_UNAUTHENTICATED=true`,
        ),
      },
      `${host} without authentication is refused`,
    );
  }
  t.equal(loadConfig({ HOST: '0.0.0.0', ALLOW_UNAUTHENTICATED: 'true' }).ALLOW_UNAUTHENTICATED, true, 'unless said');
  t.throws(() => loadConfig({ HOST: '0.0.0.0', ALLOW_UNAUTHENTICATED: 'false' }), /Refusing to listen/);
  t.throws(() => loadConfig({ ALLOW_UNAUTHENTICATED: 'yes' }), /ALLOW_UNAUTHENTICATED/);
  t.equal(loadConfig({ HOST: '0.0.0.0', AUTH_TOKENS_FILE: '/etc/tokens' }).HOST, '0.0.0.0', 'or authenticated');

  t.same(loadConfig({}).AUTH_OPEN_PATHS, ['/healthz', '/readyz'], 'the probes are open by default');
  t.same(loadConfig({ AUTH_OPEN_PATHS: ' /metrics , /healthz' }).AUTH_OPEN_PATHS, ['/metrics', '/healthz']);
  t.throws(
    () => loadConfig({ AUTH_OPEN_PATHS: '/metrics,/v1/projects' }),
    /AUTH_OPEN_PATHS: "\/v1\/projects": is not one of/,
  );
});

t.test('TLS settings go together', async (t) => {
  t.throws(() => loadConfig({ TLS_CERT_FILE: '/cert.pem' }), /Set TLS_CERT_FILE and TLS_KEY_FILE together/);
  t.throws(() => loadConfig({ TLS_KEY_FILE: '/key.pem' }), /together/);
  t.equal(loadConfig({ TLS_CERT_FILE: '/cert.pem', TLS_KEY_FILE: '/key.pem' }).TLS_KEY_FILE, '/key.pem');
});

t.test('limits: Pub/Sub quotas and finite defaults, each a setting; the rate limit is off unless set', async (t) => {
  const config = loadConfig({});
  t.match(config, {
    MAX_TOPICS_PER_PROJECT: 10_000,
    MAX_SUBSCRIPTIONS_PER_PROJECT: 10_000,
    MAX_SUBSCRIPTIONS_PER_TOPIC: 10_000,
    MAX_SNAPSHOTS_PER_PROJECT: 5_000,
    MAX_STREAMS_PER_SUBSCRIPTION: 1_000,
    MAX_STREAMS: 10_000,
    MAX_LONG_POLLS: 10_000,
    MAX_CONNECTIONS: 10_000,
    MAX_BODY_MIB_IN_FLIGHT: 1024,
  });
  t.equal(config.RATE_LIMIT_PER_SECOND, undefined);
  t.equal(loadConfig({ MAX_TOPICS_PER_PROJECT: '50' }).MAX_TOPICS_PER_PROJECT, 50);
  t.equal(loadConfig({ RATE_LIMIT_PER_SECOND: '0.5' }).RATE_LIMIT_PER_SECOND, 0.5);
  for (const [name, value] of [
    ['MAX_STREAMS', '0'],
    ['MAX_CONNECTIONS', '1.5'],
    ['MAX_LONG_POLLS', 'many'],
    ['RATE_LIMIT_PER_SECOND', '0'],
  ]) {
    t.throws(() => loadConfig({ [name]: value }), new RegExp(`${name}:`), `${name}=${value} is refused`);
  }
});

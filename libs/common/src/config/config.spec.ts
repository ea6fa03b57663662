import { loadConfig, redisTargetOf } from './config';

describe('configuration', () => {
  it('uses REDIS_URL unless REDIS_CLUSTER_NODES names seed nodes', () => {
    expect(redisTargetOf(loadConfig({}))).toEqual({ url: 'redis://127.0.0.1:6379' });
    expect(redisTargetOf(loadConfig({ REDIS_CLUSTER_NODES: '' }))).toEqual({ url: 'redis://127.0.0.1:6379' });
    const config = loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, redis-b:7001,[::1]:7002' });
    expect(redisTargetOf(config)).toEqual({
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: 'redis-b', port: 7001 },
        { host: '::1', port: 7002 },
      ],
    });
  });

  it.each(['10.0.0.1', '10.0.0.1:0', 'a:70000', 'redis://a:7000', 'a:7000;b:7001'])(
    'refuses REDIS_CLUSTER_NODES=%s with what it must be',
    (value) => {
      expect(() => loadConfig({ REDIS_CLUSTER_NODES: value })).toThrow(/REDIS_CLUSTER_NODES.*host:port pairs/);
    },
  );
});

import { deviceStateCodec } from './device-state-codec';
import type { DeviceState } from './device-state-codec';

describe('the device state codec', () => {
  it('keeps the field names deployments hold', () => {
    expect(deviceStateCodec.names).toEqual({
      dispatcher: 'disp',
      connectedAt: 'conn',
      heartbeatAt: 'hb',
      pool: 'pool',
      available: 'avail',
      task: 'task',
      models: 'models',
      digests: 'digests',
      features: 'features',
    });
  });

  it('reads back every field it wrote', () => {
    const state: DeviceState = {
      dispatcher: 'disp-1',
      connectedAt: new Date(1_000),
      heartbeatAt: new Date(2_000),
      pool: 'network',
      available: true,
      task: 'network:t-1',
      models: ['llama3.2:3b', 'm/2'],
      digests: [`sha256:${'a'.repeat(64)}`, ''],
      features: ['json_schema', 'tools'],
    };
    const hash = deviceStateCodec.encode(state);
    expect(hash).toEqual({
      disp: 'disp-1',
      conn: '1000',
      hb: '2000',
      pool: 'network',
      avail: '1',
      task: 'network:t-1',
      models: '["llama3.2:3b","m/2"]',
      digests: `["sha256:${'a'.repeat(64)}",""]`,
      features: '["json_schema","tools"]',
    });
    expect(deviceStateCodec.decode(hash)).toEqual(state);
  });

  it('reads a missing state as no dispatcher, nothing served and no task', () => {
    expect(deviceStateCodec.decode({})).toEqual({
      dispatcher: null,
      connectedAt: null,
      heartbeatAt: null,
      pool: null,
      available: false,
      task: null,
      models: [],
      digests: [],
      features: [],
    });
    // The transitions clear the task by writing it empty.
    expect(deviceStateCodec.decode({ task: '' }).task).toBeNull();
  });
});

import { RequestTraces } from './request-traces';
import { startSpan, startTracing, traceIdOf, tracesRequested, tracingEnabled } from './tracing';

describe('tracing, off (no OTLP endpoint)', () => {
  it('starts nothing, and makes no span: the request path pays a boolean', async () => {
    expect(tracesRequested({})).toBe(false);
    expect(await startTracing('switchyard-api', {})).toBe(false);
    expect(tracingEnabled()).toBe(false);
    expect(startSpan('device run', `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`)).toBeNull();
    RequestTraces.begin('r-1', 'POST /v1/chat/completions', {
      traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`,
    });
    expect(RequestTraces.traceparent('r-1')).toBeUndefined();
  });

  it('asks for traces when either OTLP endpoint variable is set', () => {
    expect(tracesRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(true);
    expect(tracesRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toBe(true);
  });
});

describe('trace context', () => {
  it('reads the trace id of a W3C traceparent, and nothing of a malformed or all-zero one', () => {
    const id = '4bf92f3577b34da6a3ce929d0e0e4736';
    expect(traceIdOf(`00-${id}-00f067aa0ba902b7-01`)).toBe(id);
    for (const bad of [
      undefined,
      '',
      'junk',
      `00-${id.toUpperCase()}-00f067aa0ba902b7-01`,
      `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`,
    ]) {
      expect([bad, traceIdOf(bad)]).toEqual([bad, null]);
    }
  });
});

import { ROOT_CONTEXT, SpanKind, SpanStatusCode, propagation, trace } from '@opentelemetry/api';
import type { Context, Span, SpanOptions } from '@opentelemetry/api';

/**
 * OpenTelemetry traces, off by default and free when off (docs/operations.md, "Traces"). With
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, startTracing loads the
 * OpenTelemetry JS SDK and exports this process's spans over OTLP/HTTP; the SDK reads the rest of its
 * standard variables itself (`OTEL_SERVICE_NAME`, `OTEL_BSP_SCHEDULE_DELAY`, headers, …). Without it,
 * the SDK is never loaded, and every helper here returns at once without making a span.
 *
 * A trace crosses the processes as a W3C `traceparent`: from the client's request header to the api's
 * request span, in the job to the dispatcher's spans, in `task:assign` to the agent, and in the
 * agent's request to its runtime.
 */

/** The processes that export spans, as their `service.name`. */
export type TracedService = 'switchyard-api' | 'switchyard-dispatcher' | 'switchyard-device';

let provider: { shutdown(): Promise<void>; forceFlush(): Promise<void> } | null = null;

/** Whether this process exports spans (startTracing found an endpoint). */
export function tracingEnabled(): boolean {
  return provider !== null;
}

/** Whether the environment asks for traces. */
export function tracesRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/**
 * Starts exporting this process's spans when the environment asks for it; returns whether it did.
 * Call once, before the process serves anything.
 */
export async function startTracing(service: TracedService, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (provider || !tracesRequested(env)) {
    return provider !== null;
  }
  // Loaded only here: a process without an endpoint never loads the SDK.
  const [{ NodeTracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, { resourceFromAttributes }] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
  const node = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME || service }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  // The global tracer provider, AsyncLocalStorage context and the W3C trace-context propagator.
  node.register();
  provider = node;
  return true;
}

/** Sends the spans not yet exported and stops (at shutdown). */
export async function stopTracing(): Promise<void> {
  const stopping = provider;
  provider = null;
  await stopping?.shutdown().catch(() => undefined);
}

const tracer = () => trace.getTracer('switchyard');

/** The context a W3C `traceparent` names (a new trace where it is absent or malformed). */
export function contextOf(traceparent: string | undefined): Context {
  return traceparent ? propagation.extract(ROOT_CONTEXT, { traceparent }) : ROOT_CONTEXT;
}

/** The `traceparent` that makes a span the parent of what another process does. */
export function traceparentOf(span: Span): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(ROOT_CONTEXT, span), carrier);
  return carrier.traceparent;
}

/** The trace id of a `traceparent` (32 hex digits), or null. */
export function traceIdOf(traceparent: string | undefined): string | null {
  const match = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceparent ?? '');
  return match && !/^0+$/.test(match[1]) ? match[1] : null;
}

/**
 * Starts a span, child of the span `parent` names (a `traceparent`), or of nothing; null when tracing
 * is off, so that callers make nothing at all then.
 */
export function startSpan(name: string, parent: string | undefined, options: SpanOptions = {}): Span | null {
  if (!provider) {
    return null;
  }
  return tracer().startSpan(name, options, contextOf(parent));
}

/** Ends a span as failed, with the error code a client or a device got. */
export function endFailed(span: Span | null, code: string, at?: number): void {
  if (span) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: code });
    span.setAttribute('switchyard.error_code', code);
    span.end(at);
  }
}

export { SpanKind };
export type { Span };

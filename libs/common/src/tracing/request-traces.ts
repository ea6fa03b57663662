import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { Span } from '@opentelemetry/api';
import { startSpan, traceparentOf, tracingEnabled } from './tracing';

/**
 * The api's request spans, by request id: started when a request arrives (child of the client's
 * `traceparent`, when it sends one) and ended when its answer is written, so that intake can hand the
 * span's `traceparent` to the task's job without threading it through every handler. Empty while
 * tracing is off.
 */
export class RequestTraces {
  private static readonly spans = new Map<string, Span>();

  /** A request arrived: its span, if tracing is on. */
  static begin(requestId: string, name: string, headers: Record<string, string | string[] | undefined>): void {
    if (!tracingEnabled()) {
      return;
    }
    const given = headers.traceparent;
    const parent = typeof given === 'string' ? given : undefined;
    const span = startSpan(name, parent, { kind: SpanKind.SERVER });
    if (span) {
      RequestTraces.spans.set(requestId, span);
    }
  }

  /** The `traceparent` of a request's span (its tasks' spans are its children), if there is one. */
  static traceparent(requestId: string | undefined): string | undefined {
    const span = requestId === undefined ? undefined : RequestTraces.spans.get(requestId);
    return span ? traceparentOf(span) : undefined;
  }

  /** The request's answer is written (or its client left). */
  static end(requestId: string, status: number): void {
    const span = RequestTraces.spans.get(requestId);
    if (!span) {
      return;
    }
    RequestTraces.spans.delete(requestId);
    span.setAttribute('http.response.status_code', status);
    if (status >= 500) {
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  }
}

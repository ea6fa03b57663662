import { api } from '../api';
import type { Traffic, TrafficMinute } from '../admin-types';
import { chart, destroyCharts } from '../charts';
import { h, table } from '../dom';
import type { View, ViewContext } from '../view';

/** A minute without requests: the api leaves it out of its answer. */
const IDLE_MINUTE: Omit<TrafficMinute, 'at'> = {
  requests: 0,
  requests_per_second: 0,
  errors: 0,
  ttft_p50_ms: null,
  ttft_p95_ms: null,
  duration_p50_ms: null,
  duration_p95_ms: null,
};

/** The last hour: requests, latencies and errors per minute as charts, errors by code as a table. */
async function render({ fill }: ViewContext): Promise<void> {
  const t = await api<Traffic>('GET', '/admin/traffic');
  destroyCharts();
  // Every minute of the window, those without requests as zero (latencies as gaps): lines, not dots.
  const byMinute = new Map(t.minutes.map((b) => [Date.parse(b.at) / 1000, b]));
  const last = Math.floor(Date.now() / 60_000) * 60;
  const xs = Array.from({ length: t.window_minutes }, (_, i) => last - (t.window_minutes - 1 - i) * 60);
  const m = xs.map((x) => byMinute.get(x) ?? IDLE_MINUTE);
  const total = m.reduce((n, b) => n + b.requests, 0);
  const errors = m.reduce((n, b) => n + b.errors, 0);
  fill(
    h(
      'p',
      { 'data-testid': 'traffic-summary' },
      `Last hour: ${total} requests, ${errors} errors (${total ? ((100 * errors) / total).toFixed(1) : '0.0'} %)`,
    ),
    h(
      'div',
      { class: 'charts' },
      chart('Requests per second', [{ label: 'req/s', values: m.map((b) => b.requests_per_second) }], xs),
      chart(
        'Time to first token (ms)',
        [
          { label: 'p50', values: m.map((b) => b.ttft_p50_ms) },
          { label: 'p95', values: m.map((b) => b.ttft_p95_ms) },
        ],
        xs,
      ),
      chart(
        'Duration (ms)',
        [
          { label: 'p50', values: m.map((b) => b.duration_p50_ms) },
          { label: 'p95', values: m.map((b) => b.duration_p95_ms) },
        ],
        xs,
      ),
      chart(
        'Error rate (%)',
        [{ label: 'errors', values: m.map((b) => (b.requests ? (100 * b.errors) / b.requests : 0)) }],
        xs,
      ),
    ),
    h('h3', {}, 'Errors by code'),
    t.errors_by_code.length
      ? table(
          ['Code', 'Count'],
          t.errors_by_code.map((e) => [e.code, String(e.count)]),
          'errors-table',
        )
      : h('p', { class: 'muted' }, 'No errors in the last hour.'),
  );
}

/** Traffic: the last hour. */
export const trafficView: View = { name: 'Traffic', live: true, render };

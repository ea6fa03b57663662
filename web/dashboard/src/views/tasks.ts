import { api } from '../api';
import type { AdminTask, Traffic } from '../admin-types';
import { h, table } from '../dom';
import { text } from '../format';
import type { View, ViewContext } from '../view';

/** The last look-up's answer (a task record or an error); kept across renders until the next look-up. */
let lookedUp: Node = h('div');

/** A task looked up by its address, and the latest failures (from the traffic report). */
async function render({ fill, refresh }: ViewContext): Promise<void> {
  const t = await api<Traffic>('GET', '/admin/traffic');
  const input = h('input', {
    name: 'task_address',
    placeholder: 'network:… or direct:…',
    size: '50',
  });
  const form = h(
    'form',
    {
      class: 'form',
      submit: (e) => {
        e.preventDefault();
        void api<AdminTask>('GET', `/admin/tasks/${encodeURIComponent(input.value.trim())}`)
          .then((task) => {
            const { segments, ...fields } = task;
            lookedUp = h(
              'div',
              {},
              table(
                ['Field', 'Value'],
                Object.entries(fields).map(([k, v]) => [
                  k,
                  typeof v === 'object' && v !== null ? JSON.stringify(v) : text(v),
                ]),
                'task-detail',
              ),
              segments ? segmentsTable(segments) : null,
            );
          })
          .catch((err: Error) => {
            lookedUp = h('p', { class: 'error' }, err.message);
          })
          .then(() => void refresh());
      },
    },
    'Task address',
    input,
    h('button', { type: 'submit' }, 'Look up'),
  );
  fill(
    form,
    lookedUp,
    h('h3', {}, 'Latest failures'),
    t.recent_failures.length
      ? table(
          ['Task', 'Org', 'Model', 'Status', 'Code', 'Queued'],
          t.recent_failures.map((f) => [f.task_address, f.org, f.model, f.status, text(f.error_code), f.queued_at]),
          'failures-table',
        )
      : h('p', { class: 'muted' }, 'No failures.'),
  );
}

/** A resumed task's parts: which device produced which part of the answer, in order. */
function segmentsTable(segments: NonNullable<AdminTask['segments']>): Node {
  return h(
    'div',
    {},
    h('h3', {}, `Resumed: ${segments.length} segments`),
    table(
      ['Attempt', 'Device', 'Tokens', 'Bytes', 'First output', 'Last output', 'SHA-256', 'Ended'],
      segments.map((s) => [
        String(s.attempt),
        s.device_id,
        String(s.tokens),
        String(s.bytes),
        text(s.first_output_at),
        text(s.last_output_at),
        s.sha256.slice(0, 16),
        s.ended,
      ]),
      'segments-table',
    ),
  );
}

/** Tasks: look one up (a resumed one with its segments), see what failed lately. */
export const tasksView: View = { name: 'Tasks', live: false, render };

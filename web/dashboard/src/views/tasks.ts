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
            lookedUp = table(
              ['Field', 'Value'],
              Object.entries(task).map(([k, v]) => [
                k,
                typeof v === 'object' && v !== null ? JSON.stringify(v) : text(v),
              ]),
              'task-detail',
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

/** Tasks: look one up, see what failed lately. */
export const tasksView: View = { name: 'Tasks', live: false, render };

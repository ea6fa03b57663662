import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './style.css';

/**
 * The operators' dashboard: one page over the admin API, signed in with a session cookie (the admin
 * token never stays in the browser). Fleet, queues and traffic refresh every 2 s; usage, tasks and
 * admin actions on demand. Every value from the server is put in the page as text, never as HTML.
 */

const REFRESH_MS = 2_000;

// The admin API's bodies are documented in docs/api.md and checked by the e2e suites, not re-typed here.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

class Unauthorized extends Error {}

/** A call of the admin API with the session cookie; a change carries the CSRF header. */
async function api(method: string, path: string, body?: unknown): Promise<Json> {
  const res = await fetch(path, {
    method,
    credentials: 'same-origin',
    headers: { 'x-switchyard-csrf': '1', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401) {
    throw new Unauthorized();
  }
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) {
    throw new Error(json?.error?.message ?? `${res.status}`);
  }
  return json;
}

/** An element with attributes and children; strings become text nodes. */
function h(
  tag: string,
  attrs: Record<string, string | ((e: Event) => void)> = {},
  ...children: (Node | string | null)[]
) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === 'function') {
      el.addEventListener(k, v);
    } else {
      el.setAttribute(k, v);
    }
  }
  for (const child of children) {
    if (child !== null) {
      el.append(child);
    }
  }
  return el;
}

function table(headers: string[], rows: (Node | string)[][], testId: string): HTMLElement {
  return h(
    'table',
    { 'data-testid': testId },
    h('thead', {}, h('tr', {}, ...headers.map((c) => h('th', {}, c)))),
    h('tbody', {}, ...rows.map((r) => h('tr', {}, ...r.map((c) => h('td', {}, c))))),
  );
}

function text(v: unknown): string {
  if (v === null || v === undefined || v === '') {
    return '–';
  }
  if (Array.isArray(v)) {
    return v.map(String).join(', ') || '–';
  }
  return typeof v === 'object' ? JSON.stringify(v) : `${v as string | number | boolean}`;
}

function since(iso: string | null): string {
  if (!iso) {
    return '–';
  }
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 60
    ? `${s}s`
    : s < 3600
      ? `${Math.floor(s / 60)}m ${s % 60}s`
      : `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

/** Asks before an admin action: a modal with the action's description, Cancel and Confirm. */
function confirmAction(message: string): Promise<boolean> {
  return new Promise((resolve) => {
    const dialog = h('dialog', { 'data-testid': 'confirm' }) as HTMLDialogElement;
    const close = (answer: boolean) => () => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h('p', {}, message),
      h('button', { click: close(false) }, 'Cancel'),
      ' ',
      h('button', { class: 'danger', click: close(true) }, 'Confirm'),
    );
    document.body.append(dialog);
    dialog.showModal();
  });
}

type View = 'Fleet' | 'Queues' | 'Traffic' | 'Usage' | 'Tasks' | 'Admin';
const VIEWS: View[] = ['Fleet', 'Queues', 'Traffic', 'Usage', 'Tasks', 'Admin'];
/** The views whose data changes by itself, refreshed every REFRESH_MS. */
const LIVE: View[] = ['Fleet', 'Queues', 'Traffic'];

const app = document.getElementById('app')!;
let current: View = 'Fleet';
let timer: number | undefined;
const fleetFilter = { model: '', org: '' };
const charts: uPlot[] = [];

function signInView(message = ''): void {
  window.clearInterval(timer);
  const input = h('input', {
    type: 'password',
    name: 'token',
    autocomplete: 'current-password',
    required: '',
  }) as HTMLInputElement;
  const error = h('p', { class: 'error', role: 'alert' }, message);
  const form = h(
    'form',
    {
      submit: (e) => {
        e.preventDefault();
        void (async () => {
          const res = await fetch('/dashboard/session', {
            method: 'POST',
            credentials: 'same-origin',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ token: input.value }),
          });
          if (res.status === 204) {
            shell();
          } else {
            error.textContent = res.status === 429 ? 'Too many attempts: wait a minute.' : 'Wrong admin token.';
          }
        })();
      },
    },
    h('label', {}, 'Admin token', h('br'), input),
    h('button', { type: 'submit' }, 'Sign in'),
    error,
  );
  app.replaceChildren(h('div', { class: 'signin' }, h('h1', {}, 'Switchyard'), form));
}

function shell(): void {
  const nav = h('nav', {}, ...VIEWS.map((v) => h('button', { 'data-view': v, click: () => show(v) }, v)));
  const signOut = h(
    'button',
    {
      click: () =>
        void fetch('/dashboard/session', { method: 'DELETE', credentials: 'same-origin' }).then(() => signInView()),
    },
    'Sign out',
  );
  app.replaceChildren(h('header', {}, h('h1', {}, 'Switchyard'), nav, signOut), h('main', { id: 'view' }));
  show(current);
}

function show(view: View): void {
  current = view;
  document.querySelectorAll('header nav button').forEach((b) => {
    if ((b as HTMLElement).dataset.view === view) {
      b.setAttribute('aria-current', 'page');
    } else {
      b.removeAttribute('aria-current');
    }
  });
  window.clearInterval(timer);
  charts.splice(0).forEach((c) => c.destroy());
  document.getElementById('view')!.replaceChildren(h('section', { 'data-testid': `view-${view}` }, h('h2', {}, view)));
  void refresh();
  if (LIVE.includes(view)) {
    timer = window.setInterval(() => void refresh(), REFRESH_MS);
  }
}

function section(): HTMLElement {
  return document.querySelector('#view section') as HTMLElement;
}

/** Puts the view's content under its heading (replacing what the last refresh put there). */
function fill(...nodes: Node[]): void {
  const s = section();
  s.replaceChildren(s.firstChild!, ...nodes);
}

async function refresh(): Promise<void> {
  const view = current;
  try {
    const render = { Fleet: fleet, Queues: queues, Traffic: traffic, Usage: usage, Tasks: tasks, Admin: admin }[view];
    await render();
  } catch (error) {
    if (error instanceof Unauthorized) {
      signInView('Your session has ended: sign in again.');
    } else if (view === current) {
      fill(h('p', { class: 'error' }, `Could not load: ${(error as Error).message}`));
    }
  }
}

async function fleet(): Promise<void> {
  const devices: Json[] = (await api('GET', '/admin/devices')).data;
  const models = [...new Set(devices.flatMap((d) => d.models as string[]))].sort();
  const orgs = [...new Set(devices.map((d) => d.org ?? 'network'))].sort();
  const select = (name: 'model' | 'org', options: string[]) => {
    const el = h(
      'select',
      { name, change: (e) => ((fleetFilter[name] = (e.target as HTMLSelectElement).value), void refresh()) },
      h('option', { value: '' }, `any ${name}`),
      ...options.map((o) => h('option', { value: o }, o)),
    ) as HTMLSelectElement;
    el.value = fleetFilter[name];
    return el;
  };
  const shown = devices.filter(
    (d) =>
      (!fleetFilter.model || d.models.includes(fleetFilter.model)) &&
      (!fleetFilter.org || (d.org ?? 'network') === fleetFilter.org),
  );
  const online = devices.filter((d) => d.online).length;
  const rows = shown.map((d) => [
    d.name,
    d.pool,
    text(d.org),
    d.status === 'revoked' ? h('span', { class: 'error' }, 'revoked') : 'active',
    h('span', { class: d.online ? 'online' : 'offline' }, d.online ? 'online' : 'offline'),
    d.online ? (d.available ? 'yes' : 'no (runtime down)') : '–',
    text(d.models),
    text(d.features),
    text(d.task),
    d.online ? since(d.connected_at) : '–',
    d.status === 'revoked'
      ? ''
      : h(
          'button',
          {
            class: 'danger',
            click: () =>
              void confirmAction(`Revoke device ${d.name}? It is disconnected and its token stops working.`).then(
                async (ok) => ok && (await api('DELETE', `/admin/devices/${d.id}`), await refresh()),
              ),
          },
          'Revoke',
        ),
  ]);
  fill(
    h('p', { 'data-testid': 'fleet-summary' }, `${online} online, ${devices.length - online} offline`),
    h('div', { class: 'filters' }, 'Filter:', select('model', models), select('org', orgs)),
    table(
      ['Device', 'Pool', 'Org', 'Status', 'Online', 'Available', 'Models', 'Features', 'Task', 'Connected for', ''],
      rows,
      'fleet-table',
    ),
  );
}

async function queues(): Promise<void> {
  const data: Json[] = (await api('GET', '/admin/queues')).data;
  fill(
    data.length === 0
      ? h('p', { class: 'muted' }, 'No queue has a device online or a job waiting.')
      : table(
          ['Model', 'Pool', 'Org', 'Waiting', 'Oldest wait', 'Devices', 'Busy', 'Lines'],
          data.map((q) => [
            q.model,
            q.pool,
            text(q.org),
            String(q.waiting),
            q.oldest_wait_ms === null ? '–' : `${(q.oldest_wait_ms / 1000).toFixed(1)} s`,
            String(q.devices_online),
            String(q.devices_busy),
            text(q.lines.map((l: Json) => `${l.org ?? l.org_id}: ${l.waiting}`)),
          ]),
          'queues-table',
        ),
  );
}

function chart(title: string, series: { label: string; values: (number | null)[] }[], xs: number[]): HTMLElement {
  const box = h('div', { class: 'chart' }, h('h3', {}, title));
  const colors = ['#2f6fdb', '#d9822b', '#0a7d33', '#b3261e'];
  const plot = new uPlot(
    {
      width: 460,
      height: 180,
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: colors[i % colors.length], width: 2 }))],
      axes: [{}, { size: 60 }],
    },
    [xs, ...series.map((s) => s.values)] as uPlot.AlignedData,
    box,
  );
  charts.push(plot);
  return box;
}

async function traffic(): Promise<void> {
  const t = await api('GET', '/admin/traffic');
  charts.splice(0).forEach((c) => c.destroy());
  // Every minute of the window, those without requests as zero (latencies as gaps): lines, not dots.
  const byMinute = new Map<number, Json>((t.minutes as Json[]).map((b) => [Date.parse(b.at) / 1000, b]));
  const last = Math.floor(Date.now() / 60_000) * 60;
  const xs = Array.from({ length: t.window_minutes as number }, (_, i) => last - (t.window_minutes - 1 - i) * 60);
  const m: Json[] = xs.map(
    (x) =>
      byMinute.get(x) ?? {
        requests: 0,
        requests_per_second: 0,
        errors: 0,
        ttft_p50_ms: null,
        ttft_p95_ms: null,
        duration_p50_ms: null,
        duration_p95_ms: null,
      },
  );
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
          t.errors_by_code.map((e: Json) => [e.code, String(e.count)]),
          'errors-table',
        )
      : h('p', { class: 'muted' }, 'No errors in the last hour.'),
  );
}

const monthStart = () => new Date().toISOString().slice(0, 8) + '01';
const usageRange = { from: monthStart(), to: '' };

async function usage(): Promise<void> {
  const query = new URLSearchParams({ group_by: 'org,model', from: usageRange.from });
  if (usageRange.to) {
    query.set('to', usageRange.to);
  }
  const report = await api('GET', `/admin/usage?${query.toString()}`);
  const input = (name: 'from' | 'to') =>
    h('input', {
      type: 'date',
      name,
      value: usageRange[name],
      change: (e) => ((usageRange[name] = (e.target as HTMLInputElement).value), void refresh()),
    });
  fill(
    h(
      'div',
      { class: 'form' },
      'From',
      input('from'),
      'to',
      input('to'),
      h('span', { class: 'muted' }, '(empty: now)'),
    ),
    report.data.length
      ? table(
          [
            'Org',
            'Model',
            'Requests',
            'Completed',
            'Failed',
            'Cancelled',
            'Prompt tokens',
            'Completion tokens',
            'TTFT p50',
            'Duration p50',
          ],
          report.data.map((r: Json) => [
            text(r.org),
            r.model,
            String(r.requests),
            String(r.completed),
            String(r.failed),
            String(r.cancelled),
            String(r.prompt_tokens),
            String(r.completion_tokens),
            r.ttft_ms?.p50 === null || r.ttft_ms?.p50 === undefined ? '–' : `${r.ttft_ms.p50} ms`,
            r.duration_ms?.p50 === null || r.duration_ms?.p50 === undefined ? '–' : `${r.duration_ms.p50} ms`,
          ]),
          'usage-table',
        )
      : h('p', { class: 'muted' }, 'No usage in this range.'),
  );
}

let lookedUp: Node = h('div');

async function tasks(): Promise<void> {
  const t = await api('GET', '/admin/traffic');
  const input = h('input', {
    name: 'task_address',
    placeholder: 'network:… or direct:…',
    size: '50',
  }) as HTMLInputElement;
  const form = h(
    'form',
    {
      class: 'form',
      submit: (e) => {
        e.preventDefault();
        void api('GET', `/admin/tasks/${encodeURIComponent(input.value.trim())}`)
          .then((task: Json) => {
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
          t.recent_failures.map((f: Json) => [
            f.task_address,
            f.org,
            f.model,
            f.status,
            text(f.error_code),
            f.queued_at,
          ]),
          'failures-table',
        )
      : h('p', { class: 'muted' }, 'No failures.'),
  );
}

let adminOrg = '';

async function admin(): Promise<void> {
  const orgs: Json[] = (await api('GET', '/admin/orgs')).data;
  adminOrg ||= orgs[0]?.name ?? '';
  const picker = h(
    'select',
    { name: 'org', change: (e) => ((adminOrg = (e.target as HTMLSelectElement).value), void refresh()) },
    ...orgs.map((o) => h('option', { value: o.name }, o.name)),
  ) as HTMLSelectElement;
  picker.value = adminOrg;
  if (!adminOrg) {
    fill(h('p', { class: 'muted' }, 'No organization yet.'));
    return;
  }
  const [keys, models] = await Promise.all([
    api('GET', `/admin/orgs/${encodeURIComponent(adminOrg)}/keys`),
    api('GET', '/admin/models'),
  ]);
  const act = (message: string, method: string, path: string) => () =>
    void confirmAction(message).then(async (ok) => ok && (await api(method, path), await refresh()));
  fill(
    h('div', { class: 'form' }, 'Organization', picker),
    h('h3', {}, 'API keys'),
    table(
      ['Prefix', 'Label', 'Status', 'Last used', ''],
      keys.data.map((k: Json) => [
        k.prefix,
        text(k.label),
        k.status,
        text(k.last_used_at),
        k.status === 'active'
          ? h(
              'button',
              {
                class: 'danger',
                click: act(`Revoke key ${k.prefix}… of ${adminOrg}?`, 'DELETE', `/admin/keys/${k.id}`),
              },
              'Revoke',
            )
          : '',
      ]),
      'keys-table',
    ),
    h('h3', {}, 'Models'),
    table(
      ['Model', `Enabled for ${adminOrg}`, ''],
      models.data.map((m: Json) => {
        const enabled = (m.enabled_for as string[]).includes(adminOrg);
        const path = `/admin/orgs/${encodeURIComponent(adminOrg)}/models/${encodeURIComponent(m.id)}`;
        return [
          m.id,
          enabled ? 'yes' : 'no',
          h(
            'button',
            {
              click: act(
                `${enabled ? 'Disable' : 'Enable'} ${m.id} for ${adminOrg}?`,
                enabled ? 'DELETE' : 'PUT',
                path,
              ),
            },
            enabled ? 'Disable' : 'Enable',
          ),
        ];
      }),
      'models-table',
    ),
  );
}

/** Signed in already (a live session cookie)? Then straight to the fleet. */
void fetch('/dashboard/session', { credentials: 'same-origin' })
  .then((res) => res.json() as Promise<{ signed_in: boolean }>)
  .then(
    (state) => (state.signed_in ? shell() : signInView()),
    () => signInView(),
  );

import { Unauthorized, endSession } from './api';
import { destroyCharts } from './charts';
import { h } from './dom';
import { signInForm } from './signin';
import { VIEW_NAMES } from './view';
import type { View, ViewContext, ViewName } from './view';
import { adminView } from './views/admin';
import { auditView } from './views/audit';
import { fleetView } from './views/fleet';
import { queuesView } from './views/queues';
import { tasksView } from './views/tasks';
import { trafficView } from './views/traffic';
import { usageView } from './views/usage';

/** How often a live view (fleet, queues, traffic) is fetched again while it is shown. */
const REFRESH_MS = 2_000;

const VIEWS: Record<ViewName, View> = {
  Fleet: fleetView,
  Queues: queuesView,
  Traffic: trafficView,
  Usage: usageView,
  Tasks: tasksView,
  Admin: adminView,
  Audit: auditView,
};

const app = document.getElementById('app')!;
let current: ViewName = 'Fleet';
let timer: number | undefined;

/** The sign-in form in place of the page; `message` says why (a session that ended). */
export function signInView(message = ''): void {
  window.clearInterval(timer);
  app.replaceChildren(signInForm(message, shell));
}

/** The signed-in page: the header with the views and Sign out, and the current view. */
export function shell(): void {
  const nav = h('nav', {}, ...VIEW_NAMES.map((v) => h('button', { 'data-view': v, click: () => show(v) }, v)));
  const signOut = h('button', { click: () => void endSession().then(() => signInView()) }, 'Sign out');
  app.replaceChildren(h('header', {}, h('h1', {}, 'Switchyard'), nav, signOut), h('main', { id: 'view' }));
  show(current);
}

function show(view: ViewName): void {
  current = view;
  document.querySelectorAll('header nav button').forEach((b) => {
    if ((b as HTMLElement).dataset.view === view) {
      b.setAttribute('aria-current', 'page');
    } else {
      b.removeAttribute('aria-current');
    }
  });
  window.clearInterval(timer);
  destroyCharts();
  document.getElementById('view')!.replaceChildren(h('section', { 'data-testid': `view-${view}` }, h('h2', {}, view)));
  void refresh();
  if (VIEWS[view].live) {
    timer = window.setInterval(() => void refresh(), REFRESH_MS);
  }
}

const context: ViewContext = {
  fill: (...nodes) => {
    const s = document.querySelector('#view section') as HTMLElement;
    s.replaceChildren(s.firstChild!, ...nodes);
  },
  refresh,
};

/** Renders the current view; a failure is shown in it, an ended session goes back to sign-in. */
async function refresh(): Promise<void> {
  const view = current;
  try {
    await VIEWS[view].render(context);
  } catch (error) {
    if (error instanceof Unauthorized) {
      signInView('Your session has ended: sign in again.');
    } else if (view === current) {
      context.fill(h('p', { class: 'error' }, `Could not load: ${(error as Error).message}`));
    }
  }
}

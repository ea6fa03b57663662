// uPlot's styles first, so that the page's own rules win where both set something.
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { sessionState } from './api';
import { shell, signInView } from './shell';

/**
 * The operators' dashboard: one page over the admin API, signed in with a session cookie (the admin
 * token never stays in the browser). Fleet, queues and traffic refresh every 2 s; usage, tasks, admin
 * actions and the audit log on demand. Every value from the server is put in the page as text, never as
 * HTML.
 *
 * Signed in already (a live session cookie)? Then straight to the fleet.
 */
void sessionState().then(
  (state) => (state.signed_in ? shell() : signInView()),
  () => signInView(),
);

import { openSession } from './api';
import { h } from './dom';

/**
 * The sign-in form: the admin token is sent once to open a session (an HttpOnly cookie) and is not
 * kept in the page. `onSignedIn` runs when the api accepted it.
 */
export function signInForm(message: string, onSignedIn: () => void): HTMLElement {
  const input = h('input', {
    type: 'password',
    name: 'token',
    autocomplete: 'current-password',
    required: '',
  });
  const error = h('p', { class: 'error', role: 'alert' }, message);
  const form = h(
    'form',
    {
      submit: (e) => {
        e.preventDefault();
        void (async () => {
          const status = await openSession(input.value);
          if (status === 204) {
            onSignedIn();
          } else {
            error.textContent = status === 429 ? 'Too many attempts: wait a minute.' : 'Wrong admin token.';
          }
        })();
      },
    },
    h('label', {}, 'Admin token', h('br'), input),
    h('button', { type: 'submit' }, 'Sign in'),
    error,
  );
  return h('div', { class: 'signin' }, h('h1', {}, 'Switchyard'), form);
}

import type { DashboardSession } from './admin-types';

/** The session has ended (401): the page goes back to the sign-in form. */
export class Unauthorized extends Error {}

/**
 * A call of the admin API with the session cookie; a change carries the CSRF header. `T` is the body
 * the route documents (admin-types.ts): the page trusts its own api, it does not check the body again.
 */
export async function api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
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
  const json = (text ? JSON.parse(text) : null) as (T & { error?: { message?: string } }) | null;
  if (!res.ok) {
    throw new Error(json?.error?.message ?? `${res.status}`);
  }
  return json as T;
}

/** Opens a session with the admin token; answers the status (204 signed in, 401 wrong token, 429 too many tries). */
export async function openSession(token: string): Promise<number> {
  const res = await fetch('/dashboard/session', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  return res.status;
}

/** Ends the session (the cookie stops working at the server too). */
export async function endSession(): Promise<void> {
  await fetch('/dashboard/session', { method: 'DELETE', credentials: 'same-origin' });
}

/** Whether the browser holds a live session cookie. */
export async function sessionState(): Promise<DashboardSession> {
  const res = await fetch('/dashboard/session', { credentials: 'same-origin' });
  return (await res.json()) as DashboardSession;
}

import { z } from 'zod';
import { named } from '../openapi/components';

/** The sign-in's body: the admin token, bounded so that the sign-in's own body limit holds it. */
export const signInBody = z.strictObject({ token: z.string().max(1024).describe('The server’s ADMIN_TOKEN') });

/** `GET /dashboard/session`. */
export const dashboardSession = named(
  'DashboardSession',
  'Whether the request carries a live dashboard session cookie.',
  z.strictObject({ signed_in: z.boolean() }),
);

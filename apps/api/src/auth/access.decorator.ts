import { SetMetadata } from '@nestjs/common';

/** Who may call a route. Routes are `api_key` unless they say otherwise. */
export type Access = 'public' | 'api_key' | 'admin';
export const ACCESS_KEY = 'switchyard:access';

/** A route anyone may call (health checks). */
export const Public = () => SetMetadata(ACCESS_KEY, 'public' satisfies Access);
/** A route for operators, authorized by ADMIN_TOKEN. */
export const AdminOnly = () => SetMetadata(ACCESS_KEY, 'admin' satisfies Access);

import { z } from 'zod';

/**
 * The named schemas of the OpenAPI document (`components/schemas`): every response schema is
 * registered here under its component name by the file that defines it, beside its feature's routes.
 */
export const components = z.registry<{ id: string; description?: string }>();

/** Registers a response schema under the name it gets in the document. */
export function named<T extends z.ZodType>(id: string, description: string, schema: T): T {
  components.add(schema, { id, description });
  return schema;
}

/** The shape of every list answer: `{"object": "list", "data": [...]}`. */
export const listOf = <T extends z.ZodType>(item: T) =>
  z.strictObject({ object: z.literal('list'), data: z.array(item) });

/** Descriptions of the path parameters that several features share. */
export const PARAM = {
  address: 'A task address, `direct:<uuid>` or `network:<uuid>`',
  model: 'A model id; a `/` in it is sent as %2F',
  org: 'An organization, by name',
} as const;

/** A monthly token budget as the bodies give it and the answers show it. */
export const budget = z
  .number()
  .int()
  .nullable()
  .describe(
    'The most tokens (prompt and completion) its requests may use in a calendar month (UTC): 0 to 1,000,000,000,000,000, or null for no ceiling. Over it, requests get 429 insufficient_quota until the month ends',
  );

import { z } from 'zod';
import { listOf, named } from '../openapi/components';

/** A model as /v1/models shows it, OpenAI's shape. */
export const model = named(
  'Model',
  'A model enabled for the caller’s organization.',
  z.strictObject({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() }),
);
export const modelList = named('ModelList', 'The models enabled for the caller’s organization.', listOf(model));

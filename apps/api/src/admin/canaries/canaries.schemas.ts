import { z } from 'zod';
import { listOf, named } from '../../openapi/components';

/*
 * The bodies the canaries routes validate (strict: an unknown key is 400) and the answers they give.
 * Values are checked further by the admin service, so that the CLI and the API refuse the same things.
 */

const message = z.strictObject({
  role: z.enum(['system', 'user', 'assistant']),
  content: z.string().describe('1-8,000 characters'),
});
const expect = z
  .union([
    z.strictObject({ equals: z.string().describe('The whole answer, exactly (1-2,000 characters)') }),
    z.strictObject({ contains: z.string().describe('Text the answer must hold (1-2,000 characters)') }),
  ])
  .describe('What the answer of a device that runs the model must be, or hold');

export const addCanaryBody = z.strictObject({
  messages: z.array(message).describe('1-16 chat messages, the last one from the user'),
  max_tokens: z.number().int().describe('1 to 1,024'),
  expect,
});

const iso = z.iso.datetime({ offset: true });
export const canary = named(
  'Canary',
  'A prompt with a known answer, sent to network devices that serve the model, at temperature 0.',
  z.strictObject({
    id: z.uuid(),
    model: z.string(),
    messages: z.array(message),
    max_tokens: z.number().int(),
    expect,
    created_at: iso,
  }),
);
export const canaryList = named('CanaryList', 'A model’s canaries, oldest first.', listOf(canary));
export const canaryRemoved = named(
  'CanaryRemoved',
  'A canary removed.',
  z.strictObject({ id: z.uuid(), model: z.string(), deleted: z.literal(true) }),
);

/** A list answer of the admin API, in the shape of OpenAI's lists (`listOf` in openapi/components.ts). */
export const list = <T>(data: T[]) => ({ object: 'list' as const, data });

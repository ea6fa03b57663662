import type { FastifyReply } from 'fastify';

/** Header values are bytes a client chose: keep them short and printable. */
const MAX_HEADER_CHARS = 4_096;
const PLAIN_NAME = /^[A-Za-z0-9_.[\]-]+$/;

/**
 * Lists the ignored fields in `x-switchyard-ignored-params`. A field name that is not plain ASCII
 * is percent-encoded (a header cannot carry it as it is); a very long list is cut.
 */
export function setIgnoredParams(reply: FastifyReply, names: string[]): void {
  if (names.length === 0) {
    return;
  }
  let value = names.map((n) => (PLAIN_NAME.test(n) ? n : encodeURIComponent(n))).join(',');
  if (value.length > MAX_HEADER_CHARS) {
    value = value.slice(0, value.lastIndexOf(',', MAX_HEADER_CHARS));
  }
  void reply.header('x-switchyard-ignored-params', value);
}

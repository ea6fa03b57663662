import { readFileSync, statSync } from 'node:fs';

/** Where the device token came from: how to say what is wrong with it without echoing it. */
export type TokenSource = 'SWITCHYARD_DEVICE_TOKEN' | '--token' | '--token-file';

/** Said once when the token is given as --token on the command line. */
export const TOKEN_ON_COMMAND_LINE_WARNING =
  'warning: --token is visible to every user of this machine in the process list; ' +
  'give it in SWITCHYARD_DEVICE_TOKEN or a --token-file readable only by you\n';

/**
 * Reads the token file: its whole content, whitespace around it aside. A file that other users may
 * read (any group or other permission bit) is refused, as ssh refuses such a private key: the token is
 * the device's whole identity. Throws an Error whose message is one line for the user.
 */
export function readTokenFile(path: string): string {
  let mode: number;
  try {
    mode = statSync(path).mode;
  } catch (error) {
    throw new Error(`--token-file ${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  if ((mode & 0o077) !== 0) {
    throw new Error(
      `--token-file ${path} may be read by other users (mode ${(mode & 0o777).toString(8)}): run chmod 600 ${path}`,
    );
  }
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (error) {
    throw new Error(`--token-file ${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? 'error'}`);
  }
}

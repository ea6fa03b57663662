import type { Ctx } from '../../lib/context';
import type { Proc } from '../../lib/stack';
import { startNode } from '../../lib/stack';

/** A bench worker process (built into dist/bench) and the port it listens on. */
export interface StartedWorker {
  proc: Proc;
  port: number;
}

/** Starts a bench worker process that reports its port over IPC once it is ready. */
export async function startWorker(ctx: Ctx, name: string, script: string, args: string[]): Promise<StartedWorker> {
  const proc = ctx.track(
    startNode(
      name,
      script,
      args,
      { PATH: process.env.PATH },
      {
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      },
    ),
  );
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${proc.output}`)), 30_000);
    proc.child.once('message', (m: { port: number }) => {
      clearTimeout(timer);
      resolve(m.port);
    });
  });
  return { proc, port };
}

import { createUpstream } from './lib/upstream';
import type { EmbedServed, UpstreamOptions, UpstreamTimings } from './lib/upstream';

/**
 * The fake OpenAI-compatible upstream as a process of its own, so that its timers do not wait for
 * the bench's client work: `node upstream-worker.js '<UpstreamOptions as JSON>'`; reports its port
 * over IPC, answers `timings` with the arrival and first-token times of marked requests and
 * `embed-log` with the /v1/embeddings requests served since the last ask, and runs until it is told
 * to stop (or its parent goes).
 */
const options = JSON.parse(process.argv[2] ?? '{}') as UpstreamOptions;
const timings: UpstreamTimings = new Map();
const embedLog: EmbedServed[] = [];
const server = createUpstream(options, timings, embedLog);
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.send?.({ type: 'listening', port: typeof address === 'object' && address ? address.port : 0 });
});
process.on('message', (message: { type?: string }) => {
  if (message?.type === 'timings') {
    process.send?.({ type: 'timings', items: [...timings.entries()] });
    timings.clear();
  }
  if (message?.type === 'embed-log') {
    process.send?.({ type: 'embed-log', items: embedLog.splice(0) });
  }
  if (message?.type === 'stop') {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  }
});
process.on('disconnect', () => process.exit(0));

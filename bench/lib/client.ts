import http from 'node:http';
import type { ClientRequest } from 'node:http';
import { performance } from 'node:perf_hooks';

/**
 * The bench's HTTP client, on node:http with keep-alive connections: much cheaper per request than
 * fetch, so that on a small machine the load generator takes as little CPU from the stack as it can.
 */
export function keepAliveAgent(maxSockets: number): http.Agent {
  return new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, scheduling: 'fifo' });
}

export interface StreamResult {
  status: number;
  /** performance.now() when the request was written. */
  sentAt: number;
  /** performance.now() of each SSE event that carried content, in order. */
  contentAt: number[];
  /** The stream ended with `data: [DONE]` and no error event. */
  complete: boolean;
  /** Switchyard's task_address, from the chunks (the upstream has none). */
  taskAddress?: string;
  /** Choice 0's text, when asked for (keepText). */
  text: string;
  error?: string;
}

export interface StreamHandle {
  done: Promise<StreamResult>;
  /** Closes the connection (a client going away). */
  abort(): void;
}

/**
 * Sends a streamed chat completion and timestamps each content event as it arrives. The SSE parse
 * is the same for the upstream and for Switchyard, so its cost is in both sides of a comparison.
 */
export function streamChat(
  url: URL,
  headers: Record<string, string>,
  body: string,
  agent: http.Agent,
  onContent?: (count: number, taskAddress: string | undefined) => void,
  keepText = false,
): StreamHandle {
  let req: ClientRequest | undefined;
  let aborted = false;
  const done = new Promise<StreamResult>((resolve) => {
    const result: StreamResult = { status: 0, sentAt: performance.now(), contentAt: [], complete: false, text: '' };
    req = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
      },
      (res) => {
        result.status = res.statusCode ?? 0;
        res.setEncoding('utf8');
        let buffer = '';
        res.on('data', (chunk: string) => {
          const at = performance.now();
          buffer += chunk;
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (!event.startsWith('data: ')) {
              continue;
            }
            const data = event.slice(6);
            if (data === '[DONE]') {
              result.complete = result.error === undefined;
              continue;
            }
            try {
              const parsed = JSON.parse(data) as {
                choices?: { delta?: { content?: string } }[];
                error?: { message?: string };
                task_address?: string;
              };
              result.taskAddress ??= parsed.task_address;
              if (parsed.error) {
                result.error = parsed.error.message ?? 'error event';
              } else if (parsed.choices?.some((c) => typeof c.delta?.content === 'string' && c.delta.content !== '')) {
                result.contentAt.push(at);
                if (keepText) {
                  result.text += parsed.choices[0]?.delta?.content ?? '';
                }
                onContent?.(result.contentAt.length, result.taskAddress);
              }
            } catch {
              result.error = 'unparseable event';
            }
          }
        });
        res.on('end', () => {
          if (result.status !== 200 && !result.error) {
            result.error = `HTTP ${result.status}: ${buffer.slice(0, 200)}`;
          }
          resolve(result);
        });
        res.on('error', (error) => {
          result.error = aborted ? 'aborted' : error.message;
          resolve(result);
        });
      },
    );
    req.on('error', (error) => {
      result.error = aborted ? 'aborted' : error.message;
      resolve(result);
    });
    req.end(body);
  });
  return {
    done,
    abort: () => {
      aborted = true;
      req?.destroy();
    },
  };
}

export interface JsonResult {
  status: number;
  /** performance.now() when the whole body had arrived. */
  endAt: number;
  body: string;
  error?: string;
}

/** Sends a JSON request and reads the whole answer. */
export function postJson(
  url: URL,
  headers: Record<string, string>,
  body: string,
  agent: http.Agent,
): Promise<JsonResult> {
  return new Promise((resolve) => {
    const req = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, endAt: performance.now(), body: text }));
        res.on('error', (error) =>
          resolve({ status: res.statusCode ?? 0, endAt: performance.now(), body: text, error: error.message }),
        );
      },
    );
    req.on('error', (error) => resolve({ status: 0, endAt: performance.now(), body: '', error: error.message }));
    req.end(body);
  });
}

/** GET, returning the status, the body and how long it took (ms). */
export function getTimed(url: URL, agent: http.Agent): Promise<{ status: number; ms: number; body: string }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = http.get(url, { agent }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - started, body: text }));
      res.on('error', () => resolve({ status: 0, ms: performance.now() - started, body: text }));
    });
    req.on('error', () => resolve({ status: 0, ms: performance.now() - started, body: '' }));
  });
}

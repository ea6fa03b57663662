/** A parsed Server-Sent Events response: status, headers, raw text, the `data:` payloads and comment lines. */
export interface SseResult {
  status: number;
  headers: Headers;
  text: string;
  /** The JSON of each data line, in order; `[DONE]` as the string '[DONE]'. */
  events: any[];
  comments: string[];
}

export function parseSse(text: string): { events: any[]; comments: string[] } {
  const events: any[] = [];
  const comments: string[] = [];
  for (const block of text.split('\n\n')) {
    for (const line of block.split('\n')) {
      if (line.startsWith('data: ')) {
        const data = line.slice(6);
        events.push(data === '[DONE]' ? '[DONE]' : JSON.parse(data));
      } else if (line.startsWith(':')) {
        comments.push(line);
      }
    }
  }
  return { events, comments };
}

/** POSTs JSON and reads the whole streamed answer. */
export async function postSse(url: string, key: string, body: unknown): Promise<SseResult> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const isSse = res.headers.get('content-type')?.startsWith('text/event-stream');
  return { status: res.status, headers: res.headers, text, ...(isSse ? parseSse(text) : { events: [], comments: [] }) };
}

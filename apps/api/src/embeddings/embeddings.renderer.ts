import type { EmbedResult } from './embed-request';
import { JsonBytes, eachVector } from './float-json';

/**
 * OpenAI's embeddings answer, as bytes:
 * `{"object":"list","data":[{"object":"embedding","index":0,"embedding":…},…],"model":…,"usage":…}`
 * plus Switchyard's `mode` and `task_addresses` (one per batch; see GET /v1/tasks/{address}), as the
 * chat answer carries `mode` and `task_address`.
 *
 * `usage` is left out when a device reported no prompt tokens, as the chat answer leaves it out: a
 * count nobody gave is not shown as zero. The openai SDKs do not validate answers, so the answer still
 * parses; `response.usage` is then undefined (Node) or None (Python).
 */
export async function renderEmbeddings(
  result: EmbedResult,
  model: string,
  encodingFormat: 'float' | 'base64',
  /** The items already written, batch by batch (see BatchParts); else they are written here. */
  parts?: Buffer[],
): Promise<Buffer> {
  const items = parts ?? [await embeddingItems(result.vectors, 0, encodingFormat)];
  const usage =
    result.promptTokens === null
      ? ''
      : `,"usage":{"prompt_tokens":${result.promptTokens},"total_tokens":${result.promptTokens}}`;
  return Buffer.concat([
    Buffer.from('{"object":"list","data":['),
    ...items,
    Buffer.from(
      `],"model":${JSON.stringify(model)}${usage},"mode":${JSON.stringify(result.mode)},"task_addresses":${JSON.stringify(result.taskAddresses)}}`,
    ),
  ]);
}

/**
 * The `data` items of vectors whose first is input `first` of the request, each with the comma
 * before it but for the answer's first: `{"object":"embedding","index":…,"embedding":…}`.
 */
export async function embeddingItems(
  vectors: string[],
  first: number,
  encodingFormat: 'float' | 'base64',
): Promise<Buffer> {
  const out = new JsonBytes();
  const item = (index: number) => `${index > 0 ? ',' : ''}{"object":"embedding","index":${index},"embedding":`;
  if (encodingFormat === 'base64') {
    vectors.forEach((vector, i) => {
      out.text(item(first + i));
      // Written apart: a string joined to an 8 KiB vector would be copied once more to be flattened.
      out.text(JSON.stringify(vector));
      out.text('}');
    });
  } else {
    await eachVector(vectors, (values, i) => {
      out.text(item(first + i));
      out.floats(values);
      out.text('}');
    });
  }
  return out.bytes();
}

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
): Promise<Buffer> {
  const out = new JsonBytes();
  out.text('{"object":"list","data":[');
  const item = (index: number) => `${index > 0 ? ',' : ''}{"object":"embedding","index":${index},"embedding":`;
  if (encodingFormat === 'base64') {
    result.vectors.forEach((vector, index) => {
      out.text(item(index));
      // Written apart: a string joined to an 8 KiB vector would be copied once more to be flattened.
      out.text(JSON.stringify(vector));
      out.text('}');
    });
  } else {
    await eachVector(result.vectors, (values, index) => {
      out.text(item(index));
      out.floats(values);
      out.text('}');
    });
  }
  const usage =
    result.promptTokens === null
      ? ''
      : `,"usage":{"prompt_tokens":${result.promptTokens},"total_tokens":${result.promptTokens}}`;
  out.text(
    `],"model":${JSON.stringify(model)}${usage},"mode":${JSON.stringify(result.mode)},"task_addresses":${JSON.stringify(result.taskAddresses)}}`,
  );
  return out.bytes();
}

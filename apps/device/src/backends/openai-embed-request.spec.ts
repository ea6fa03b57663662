import { openaiEmbedRequest, refusesBase64 } from './openai-embed-request';
import { parseErrorBody } from './upstream/runtime-errors';

void describe('openaiEmbedRequest', () => {
  void it('asks the format it is given, with the inputs as they are', () => {
    expect(openaiEmbedRequest('m', { input: ['a'] }, 'base64')).toEqual({
      model: 'm',
      input: ['a'],
      encoding_format: 'base64',
    });
    expect(openaiEmbedRequest('m', { input: [[1, 2]], dimensions: 4, truncate: false }, 'float')).toEqual({
      model: 'm',
      input: [[1, 2]],
      encoding_format: 'float',
      dimensions: 4,
    });
  });
});

void describe('refusesBase64', () => {
  const refuses = (status: number, body: unknown) => refusesBase64(status, parseErrorBody(JSON.stringify(body)));

  void it('reads the servers’ refusals of the format, in each error shape', () => {
    // vLLM, newer and older shapes.
    expect(
      refuses(400, {
        error: {
          message: "1 validation error for EmbeddingCompletionRequest\nencoding_format\n  Input should be 'float'",
          type: 'Bad Request',
          param: null,
          code: 400,
        },
      }),
    ).toBe(true);
    expect(
      refuses(400, {
        object: 'error',
        message: "encoding_format 'base64' is not supported",
        type: 'BadRequestError',
        param: null,
        code: 400,
      }),
    ).toBe(true);
    // llama.cpp's server, for a format it does not have.
    expect(
      refuses(400, {
        error: {
          code: 400,
          message: 'The format to return the embeddings in. Can be either float or base64',
          type: 'invalid_request_error',
        },
      }),
    ).toBe(true);
    // FastAPI's own validation.
    expect(refuses(422, { detail: [{ loc: ['body', 'encoding_format'], msg: "Input should be 'float'" }] })).toBe(true);
  });

  void it('takes no other error for one', () => {
    // A prompt over the context, even echoing the request.
    expect(
      refuses(400, {
        error: {
          message: "This model's maximum context length is 512 tokens. (encoding_format='base64')",
          code: 400,
        },
      }),
    ).toBe(false);
    expect(refuses(400, { error: { message: 'x', code: 'context_length_exceeded', param: 'encoding_format' } })).toBe(
      false,
    );
    // Another 400, statuses other than 400 and 422.
    expect(refuses(400, { error: { message: 'dimensions must be from 1 to 768', code: 400 } })).toBe(false);
    expect(refuses(404, { error: { message: 'The model `base64` does not exist.', code: 404 } })).toBe(false);
    expect(refuses(500, { error: { message: 'cannot encode the embeddings as base64', code: 500 } })).toBe(false);
    expect(refuses(413, 'encoding_format: payload too large')).toBe(false);
  });
});

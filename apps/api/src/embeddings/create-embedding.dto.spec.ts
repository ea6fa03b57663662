import { AppError, EMBED_MAX_INPUTS, embedInputSchema } from '@app/common';
import { embeddingIgnoredParams, parseCreateEmbedding } from './create-embedding.dto';
import { createEmbeddingSchema } from './embedding.schema';

const OPENAI_EMPTY =
  "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.";

/** The AppError a parse throws, as a plain object to compare. */
function refusal(body: unknown, defaultModel?: string) {
  try {
    parseCreateEmbedding(body, defaultModel);
  } catch (error) {
    if (error instanceof AppError) {
      return { code: error.code, param: error.param, message: error.message };
    }
    throw error;
  }
  throw new Error('parsed without an error');
}

describe('parseCreateEmbedding', () => {
  it('takes every shape of input OpenAI takes, as a list of texts or of token lists', () => {
    const input = (value: unknown) => parseCreateEmbedding({ model: 'e', input: value }, undefined).input;
    expect(input('hello')).toEqual(['hello']);
    expect(input(['a', 'b'])).toEqual(['a', 'b']);
    // A flat array of numbers is one input given as tokens, as OpenAI reads it.
    expect(input([1, 2, 3])).toEqual([[1, 2, 3]]);
    expect(input([[1, 2], [0]])).toEqual([[1, 2], [0]]);
    // What the service gets is what the device protocol takes.
    for (const value of ['x', ['a', 'b'], [7], [[1], [2, 3]]]) {
      expect(embedInputSchema.safeParse(input(value)).success).toBe(true);
    }
  });

  it('defaults: float vectors, auto mode, the configured model; opengpu is network', () => {
    expect(parseCreateEmbedding({ input: 'x' }, 'default-embed')).toEqual({
      model: 'default-embed',
      mode: 'auto',
      input: ['x'],
      encodingFormat: 'float',
    });
    const full = parseCreateEmbedding(
      { model: 'e', input: 'x', encoding_format: 'base64', dimensions: 256, mode: 'opengpu' },
      undefined,
    );
    expect(full).toEqual({ model: 'e', mode: 'network', input: ['x'], dimensions: 256, encodingFormat: 'base64' });
  });

  it('null counts as not sent', () => {
    expect(
      parseCreateEmbedding({ model: 'e', input: 'x', encoding_format: null, dimensions: null, user: null }, undefined),
    ).toEqual({ model: 'e', mode: 'auto', input: ['x'], encodingFormat: 'float' });
  });

  it('no model and no DEFAULT_MODEL is model_required', () => {
    expect(refusal({ input: 'x' })).toEqual({
      code: 'model_required',
      param: 'model',
      message: "You must provide a model parameter ('model').",
    });
  });

  it('refuses an empty input in OpenAI’s words, naming the input at fault', () => {
    expect(refusal({ model: 'e', input: '' })).toEqual({
      code: 'invalid_request',
      param: 'input',
      message: OPENAI_EMPTY,
    });
    expect(refusal({ model: 'e', input: [] })).toEqual({
      code: 'invalid_request',
      param: 'input',
      message: OPENAI_EMPTY,
    });
    expect(refusal({ model: 'e', input: ['a', ''] })).toEqual({
      code: 'invalid_request',
      param: 'input[1]',
      message: OPENAI_EMPTY,
    });
    expect(refusal({ model: 'e', input: [[1], []] })).toEqual({
      code: 'invalid_request',
      param: 'input[1]',
      message: OPENAI_EMPTY,
    });
  });

  it('refuses a missing input and inputs of the wrong types, naming where', () => {
    expect(refusal({ model: 'e' })).toEqual({
      code: 'invalid_request',
      param: 'input',
      message: "Missing required parameter: 'input'.",
    });
    for (const [input, param] of [
      [42, 'input'],
      [{ text: 'x' }, 'input'],
      [['a', 1], 'input[1]'],
      [[1, 'a'], 'input[1]'],
      [[1, -1], 'input[1]'],
      [[1.5], 'input[0]'],
      [[2 ** 31], 'input[0]'],
      [[[1], 2], 'input[1]'],
      [[[1], [2, 'x']], 'input[1][1]'],
      [[true], 'input[0]'],
      [[null], 'input[0]'],
    ] as const) {
      expect([input, refusal({ model: 'e', input })]).toEqual([
        input,
        expect.objectContaining({ code: 'invalid_request', param }),
      ]);
    }
  });

  it('takes at most 2,048 inputs', () => {
    const texts = new Array<string>(EMBED_MAX_INPUTS).fill('x');
    expect(parseCreateEmbedding({ model: 'e', input: texts }, undefined).input).toHaveLength(EMBED_MAX_INPUTS);
    expect(refusal({ model: 'e', input: [...texts, 'x'] })).toEqual({
      code: 'invalid_request',
      param: 'input',
      message: 'Too many inputs: at most 2048 per request (this one has 2049).',
    });
    const tokens = new Array<number[]>(EMBED_MAX_INPUTS + 1).fill([1]);
    expect(refusal({ model: 'e', input: tokens })).toMatchObject({ code: 'invalid_request', param: 'input' });
    // One input of many tokens is one input.
    expect(parseCreateEmbedding({ model: 'e', input: new Array(5000).fill(1) }, undefined).input).toHaveLength(1);
  });

  it('refuses bad encoding_format, dimensions, mode and model values naming the field', () => {
    for (const [field, value] of [
      ['encoding_format', 'binary'],
      ['dimensions', 0],
      ['dimensions', 1.5],
      ['dimensions', 65_537],
      ['mode', 'fast'],
      ['model', ''],
      ['model', 7],
    ] as const) {
      expect(refusal({ model: 'e', input: 'x', [field]: value })).toMatchObject({
        code: 'invalid_request',
        param: field,
        message: expect.stringContaining(`Invalid '${field}'`) as string,
      });
    }
  });

  it('a body that is not an object is refused', () => {
    for (const body of [undefined, null, 'x', [1]]) {
      expect(refusal(body)).toMatchObject({ code: 'invalid_request', param: null });
    }
  });

  it('the documented schema accepts what the parse accepts, and refuses the empty inputs too', () => {
    for (const input of ['x', ['a', 'b'], [1, 2], [[1], [2]]]) {
      expect(createEmbeddingSchema.safeParse({ input }).success).toBe(true);
    }
    for (const input of ['', [], [''], [[]], [-1], new Array(EMBED_MAX_INPUTS + 1).fill('x')]) {
      expect(createEmbeddingSchema.safeParse({ input }).success).toBe(false);
    }
  });
});

describe('embeddingIgnoredParams', () => {
  it('lists user and unknown fields sent, in the order sent, and nothing Switchyard acts on', () => {
    expect(
      embeddingIgnoredParams({
        user: 'u1',
        model: 'e',
        input: 'x',
        foo: 1,
        encoding_format: 'float',
        dimensions: 8,
        mode: 'auto',
        bar: null,
      }),
    ).toEqual(['user', 'foo']);
    expect(embeddingIgnoredParams('x')).toEqual([]);
  });
});

import { AppError, EMBED_MAX_INPUTS } from '@app/common';
import {
  embedIgnoredParams,
  embedSchema,
  embeddingsIgnoredParams,
  parseOllamaEmbed,
  parseOllamaEmbeddings,
} from './ollama-embed.dto';

/** The AppError a parse throws, as a plain object to compare. */
function refusal(parse: () => unknown) {
  try {
    parse();
  } catch (error) {
    if (error instanceof AppError) {
      return { code: error.code, param: error.param, message: error.message };
    }
    throw error;
  }
  throw new Error('parsed without an error');
}

describe('parseOllamaEmbed (/api/embed)', () => {
  it('takes a string or strings; truncate defaults to true as Ollama’s does', () => {
    expect(parseOllamaEmbed({ model: 'e', input: 'hi' })).toEqual({
      model: 'e',
      mode: 'auto',
      input: ['hi'],
      truncate: true,
    });
    expect(
      parseOllamaEmbed({ model: 'e', input: ['a', 'b'], truncate: false, dimensions: 64, mode: 'opengpu' }),
    ).toEqual({ model: 'e', mode: 'network', input: ['a', 'b'], truncate: false, dimensions: 64 });
  });

  it('no input, an empty string or an empty list is nothing to embed, as in Ollama', () => {
    for (const input of [undefined, null, '', []]) {
      expect(parseOllamaEmbed({ model: 'e', input }).input).toEqual([]);
    }
  });

  it('dimensions 0 is Ollama’s “not set”', () => {
    expect(parseOllamaEmbed({ model: 'e', input: 'x', dimensions: 0 })).not.toHaveProperty('dimensions');
    expect(refusal(() => parseOllamaEmbed({ model: 'e', input: 'x', dimensions: -1 }))).toMatchObject({
      code: 'invalid_request',
      param: 'dimensions',
    });
  });

  it('refuses with Ollama’s lower-case messages, naming the field', () => {
    expect(refusal(() => parseOllamaEmbed({ input: 'x' }))).toEqual({
      code: 'model_required',
      param: 'model',
      message: 'model is required',
    });
    for (const input of [1, [1], ['a', 2], { text: 'a' }]) {
      expect(refusal(() => parseOllamaEmbed({ model: 'e', input }))).toEqual({
        code: 'invalid_request',
        param: 'input',
        message: 'invalid input type',
      });
    }
    expect(refusal(() => parseOllamaEmbed({ model: 'e', input: ['a', ''] }))).toEqual({
      code: 'invalid_request',
      param: 'input[1]',
      message: 'input[1] is empty: every input of a list needs at least one character',
    });
    expect(
      refusal(() => parseOllamaEmbed({ model: 'e', input: new Array(EMBED_MAX_INPUTS + 1).fill('x') })),
    ).toMatchObject({ code: 'invalid_request', param: 'input' });
    expect(refusal(() => parseOllamaEmbed({ model: 'e', input: 'x', truncate: 'no' }))).toMatchObject({
      code: 'invalid_request',
      param: 'truncate',
      message: expect.stringMatching(/^invalid truncate: /) as string,
    });
    expect(refusal(() => parseOllamaEmbed('x'))).toMatchObject({ code: 'invalid_request', param: null });
  });

  it('the documented schema agrees with the parse on inputs', () => {
    for (const input of ['x', '', ['a'], []]) {
      expect(embedSchema.safeParse({ model: 'e', input }).success).toBe(true);
    }
    for (const input of [[''], [1], new Array(EMBED_MAX_INPUTS + 1).fill('x')]) {
      expect(embedSchema.safeParse({ model: 'e', input }).success).toBe(false);
    }
  });

  it('lists keep_alive, every option and unknown fields as ignored', () => {
    expect(
      embedIgnoredParams({
        model: 'e',
        input: 'x',
        truncate: true,
        dimensions: 8,
        mode: 'auto',
        keep_alive: '5m',
        options: { num_ctx: 2048, temperature: null },
        foo: 1,
      }),
    ).toEqual(['keep_alive', 'foo', 'options.num_ctx']);
  });
});

describe('parseOllamaEmbeddings (/api/embeddings)', () => {
  it('takes one prompt; none or empty is nothing to embed', () => {
    expect(parseOllamaEmbeddings({ model: 'e', prompt: 'hi' })).toEqual({ model: 'e', mode: 'auto', prompt: 'hi' });
    expect(parseOllamaEmbeddings({ model: 'e' }).prompt).toBe('');
    expect(parseOllamaEmbeddings({ model: 'e', prompt: '' }).prompt).toBe('');
  });

  it('refuses a prompt that is not a string, and a missing model', () => {
    expect(refusal(() => parseOllamaEmbeddings({ model: 'e', prompt: ['a'] }))).toMatchObject({
      code: 'invalid_request',
      param: 'prompt',
    });
    expect(refusal(() => parseOllamaEmbeddings({ prompt: 'a' }))).toMatchObject({ code: 'model_required' });
  });

  it('input, truncate and dimensions are not fields of this route: ignored and listed', () => {
    expect(embeddingsIgnoredParams({ model: 'e', prompt: 'x', input: 'y', truncate: false, keep_alive: 0 })).toEqual([
      'input',
      'truncate',
      'keep_alive',
    ]);
  });
});

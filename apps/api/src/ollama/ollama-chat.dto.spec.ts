import { AppError } from '@app/common';
import { ollamaIgnoredParams, parseOllamaChat } from './ollama-chat.dto';

const MESSAGES = [{ role: 'user', content: 'hi' }];

describe('parseOllamaChat: the OpenGPU relay fields', () => {
  it('takes temperature at the top level; options.temperature wins when both are sent', () => {
    expect(parseOllamaChat({ model: 'm', messages: MESSAGES, temperature: 0.3 }).params.temperature).toBe(0.3);
    expect(
      parseOllamaChat({ model: 'm', messages: MESSAGES, temperature: 0.3, options: { temperature: 1.5 } }).params
        .temperature,
    ).toBe(1.5);
    expect(parseOllamaChat({ model: 'm', messages: MESSAGES, temperature: 0.3 }).ignored).toEqual([]);
  });

  it('refuses a top-level temperature outside 0 to 2', () => {
    for (const temperature of [-0.1, 2.5, 'hot']) {
      let error: unknown;
      try {
        parseOllamaChat({ model: 'm', messages: MESSAGES, temperature });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(AppError);
      expect((error as AppError).code).toBe('invalid_request');
      expect((error as AppError).param).toBe('temperature');
    }
  });

  it('mode opengpu is network', () => {
    expect(parseOllamaChat({ model: 'm', messages: MESSAGES, mode: 'opengpu' }).mode).toBe('network');
  });

  it('lists ignored fields before validation', () => {
    expect(
      ollamaIgnoredParams({ model: 'm', keep_alive: '5m', foo: 1, options: { seed: 1, top_k: 3, top_p: 1 } }),
    ).toEqual(['foo', 'keep_alive', 'options.seed', 'options.top_k']);
  });
});

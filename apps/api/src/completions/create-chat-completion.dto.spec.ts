import { AppError, requirements } from '@app/common';
import { ignoredParams, parseChatCompletion } from './create-chat-completion.dto';

const MESSAGES = [{ role: 'user', content: 'hi' }];

/** The AppError a parse throws, as a plain object to compare. */
function refusal(body: unknown, options = {}) {
  try {
    parseChatCompletion(body, undefined, options);
  } catch (error) {
    if (error instanceof AppError) {
      return { code: error.code, param: error.param, message: error.message };
    }
    throw error;
  }
  throw new Error('parsed without an error');
}

describe('parseChatCompletion: the field rules', () => {
  it('mode opengpu is network; no mode is auto', () => {
    expect(parseChatCompletion({ model: 'm', messages: MESSAGES, mode: 'opengpu' }, undefined).mode).toBe('network');
    expect(parseChatCompletion({ model: 'm', messages: MESSAGES }, undefined).mode).toBe('auto');
  });

  it('the direct-only route takes direct or no mode, and refuses the others naming mode', () => {
    expect(parseChatCompletion({ model: 'm', messages: MESSAGES }, undefined, { directOnly: true }).mode).toBe(
      'direct',
    );
    expect(
      parseChatCompletion({ model: 'm', messages: MESSAGES, mode: 'direct' }, undefined, { directOnly: true }).mode,
    ).toBe('direct');
    for (const mode of ['auto', 'network', 'opengpu']) {
      expect(refusal({ model: 'm', messages: MESSAGES, mode }, { directOnly: true })).toMatchObject({
        code: 'invalid_request',
        param: 'mode',
      });
    }
  });

  it('web_search_options is carried to the device and needs the web_search feature', () => {
    const request = parseChatCompletion(
      { model: 'm', messages: MESSAGES, web_search_options: { search_context_size: 'low', user_location: null } },
      undefined,
    );
    expect(request.params.web_search_options).toEqual({ search_context_size: 'low' });
    expect(requirements(request.params, false)).toEqual([{ feature: 'web_search', param: 'web_search_options' }]);
    expect(refusal({ model: 'm', messages: MESSAGES, web_search_options: { search_context_size: 'huge' } })).toEqual({
      code: 'invalid_request',
      param: 'web_search_options.search_context_size',
      message: expect.stringContaining("Invalid 'web_search_options.search_context_size'") as string,
    });
  });

  it('include_stop_str_in_output is sent only with stop strings', () => {
    const withStop = parseChatCompletion(
      { model: 'm', messages: MESSAGES, stop: 'x', include_stop_str_in_output: true },
      undefined,
    );
    expect(withStop.params).toMatchObject({ stop: ['x'], include_stop_str_in_output: true });
    const without = parseChatCompletion(
      { model: 'm', messages: MESSAGES, include_stop_str_in_output: true },
      undefined,
    );
    expect(without.params.include_stop_str_in_output).toBeUndefined();
    expect(refusal({ model: 'm', messages: MESSAGES, include_stop_str_in_output: 'yes' })).toMatchObject({
      code: 'invalid_request',
      param: 'include_stop_str_in_output',
    });
  });

  it('a tool or function result needs tools, named by the first such message', () => {
    const conversation = [
      { role: 'user', content: 'Weather in Bern?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'w', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
    ];
    const tool = parseChatCompletion({ model: 'm', messages: conversation }, undefined);
    expect(requirements(tool.params, false)).toEqual([{ feature: 'tools', param: 'messages[2]' }]);

    const legacy = parseChatCompletion(
      {
        model: 'm',
        messages: [
          { role: 'user', content: 'Weather?' },
          { role: 'assistant', content: null, function_call: { name: 'w', arguments: '{}' } },
          { role: 'function', name: 'w', content: 'sunny' },
        ],
      },
      undefined,
    );
    expect(requirements(legacy.params, false)).toEqual([{ feature: 'tools', param: 'messages[2]' }]);

    // With tools sent as well, the field named is tools, and tools is needed once.
    const both = parseChatCompletion(
      { model: 'm', messages: conversation, tools: [{ type: 'function', function: { name: 'w' } }] },
      undefined,
    );
    expect(requirements(both.params, false)).toEqual([{ feature: 'tools', param: 'tools' }]);
  });

  it('ignored params are known before validation, for error answers too', () => {
    expect(ignoredParams({ model: 'm', seed: 1, user: null, foo: 2, temperature: 9 })).toEqual(['seed', 'foo']);
    expect(ignoredParams('not an object')).toEqual([]);
  });
});

/** One Server-Sent Event: its `event` type (`message` when none was given) and its data lines joined by `\n`. */
export interface SseEvent {
  event: string;
  data: string;
}

/**
 * Decodes Server-Sent Events line by line, as the HTML standard describes: `field: value` lines,
 * comments starting with `:`, a blank line ending each event. A bare `error: ...` line, which some
 * servers write instead of an event, is read as an `error` event.
 */
export class SseDecoder {
  private data: string[] = [];
  private event = '';

  /** Feeds one line (without its line ending); returns the event a blank line completes, if any. */
  line(line: string): SseEvent | null {
    if (line === '') {
      return this.dispatch();
    }
    if (line.startsWith(':')) {
      return null;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'data') {
      this.data.push(value);
    } else if (field === 'event') {
      this.event = value;
    } else if (field === 'error') {
      this.event = 'error';
      this.data.push(value);
    }
    return null;
  }

  /** At the end of the stream: an event that lacked its closing blank line. */
  end(): SseEvent | null {
    return this.dispatch();
  }

  private dispatch(): SseEvent | null {
    if (this.data.length === 0) {
      this.event = '';
      return null;
    }
    const out = { event: this.event || 'message', data: this.data.join('\n') };
    this.data = [];
    this.event = '';
    return out;
  }
}

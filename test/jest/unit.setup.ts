// Unit specs do no I/O: a test that takes this long is stuck.
jest.setTimeout(10_000);

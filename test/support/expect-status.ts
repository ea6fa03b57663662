/**
 * Expects an HTTP answer's status. A failure prints the answer's body with it (what the server said),
 * which `expect(res.status).toBe(…)` would not.
 */
export function expectStatus(res: { status: number; text: string }, status: number): void {
  expect({ status: res.status, body: res.text }).toEqual(expect.objectContaining({ status }));
}

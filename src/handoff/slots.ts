/** At most `n` attempts in flight: `acquire` waits until one of them is released. */
export class Slots {
  #free: number;
  #waiting: (() => void)[] = [];

  constructor(n: number) {
    this.#free = n;
  }

  acquire(): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#free++;
  }
}

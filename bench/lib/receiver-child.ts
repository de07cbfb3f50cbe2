// The webhook receiver (tools/webhook-receiver.ts) as a process of its own, for the bench
// (./receiver.ts starts it): prints its URL as one JSON line, and ends when its stdin closes.
import { startWebhookReceiver } from "../../tools/webhook-receiver";

const receiver = await startWebhookReceiver();
process.stdout.write(`${JSON.stringify({ url: receiver.url })}\n`);
process.stdin.resume();
process.stdin.on("end", () => void receiver.close().then(() => process.exit(0)));

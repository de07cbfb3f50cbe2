const encoder = new TextEncoder();

/**
 * Compares two secrets in constant time. Both sides are hashed first so that the comparison
 * neither leaks the length nor needs equal-length inputs.
 */
export async function timingSafeEqualText(a: string, b: string): Promise<boolean> {
  const [da, db] = await Promise.all([
    crypto.subtle.digest("SHA-256", encoder.encode(a)),
    crypto.subtle.digest("SHA-256", encoder.encode(b)),
  ]);
  return crypto.subtle.timingSafeEqual(da, db);
}

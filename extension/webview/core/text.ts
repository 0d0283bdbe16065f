// Short texts for small boxes.

/** 'model/dense_1/MatMul/ReadVariableOp' shortened from the left to at most `max` characters, on a '/' when possible. */
export function shortOpName(name: string, max = 34): string {
  if (name.length <= max) {
    return name;
  }
  const tail = name.slice(name.length - (max - 1));
  const cut = tail.indexOf('/');
  return '…' + (cut >= 0 && cut < tail.length - 1 ? tail.slice(cut) : tail);
}

export function baseName(path: string): string {
  const parts = path.split(/[\\/]/);
  return parts[parts.length - 1] ?? path;
}

export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

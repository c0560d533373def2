"""What a ragged all-to-all moves: its payload and its worst-case receive buffer.

``ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets,
recv_sizes)`` sends rows of ``input`` to the group's devices, as many to each as
``send_sizes`` says at run time, into buffers of ``output``'s shape (the
result). XLA sizes that buffer statically, for the most rows the program lets
one device receive. What is sent is received, so on average over the devices a
device sends at most the smaller of its two buffers: the payload this code
counts. Routing that sends every row reaches it (a dropless mixture of
experts' dispatch sends each token's ``top_k`` rows; its combine sends them
back), and its wire bytes are ``(n-1)/n`` of it, the rows taken as spread
evenly over the group of ``n`` (each device keeps ``1 / n``).
"""

from collections.abc import Sequence

from nnx_introspect._render import format_bytes


def note_ragged(rows: Sequence[tuple[int, int, int]]) -> str | None:
    """The note on ragged all-to-alls, or ``None`` without any.

    ``rows`` are ``(worst-case receive buffer, payload, runs per step)`` bytes
    per device of each ragged all-to-all instruction.

    Example:
        >>> print(note_ragged([(1 << 20, 1 << 18, 2), (1 << 18, 1 << 18, 2)]))
        ... # doctest: +NORMALIZE_WHITESPACE
        Ragged all-to-all (2 instructions, 4 runs per step): how many rows
        each device sends is decided at run time by the routing. Bytes: the
        payload when every row of the send buffer is sent (a dropless MoE's
        dispatch, and its combine sending the rows back), the smaller of the
        send buffer and the receive buffer. Wire: (n-1)/n of it, the rows
        taken as spread evenly over the group. XLA sizes each receive buffer
        statically for the worst case, whatever the routing: 1 MiB for a 256
        KiB payload (4.0x; 2 runs), 256 KiB for a 256 KiB payload (1.0x; 2
        runs).
        >>> note_ragged([]) is None
        True
    """
    if not rows:
        return None
    runs = sum(count for _, _, count in rows)
    pairs: dict[tuple[int, int], int] = {}
    for buffer, payload, count in rows:
        pairs[(buffer, payload)] = pairs.get((buffer, payload), 0) + count
    buffers = [
        f"{format_bytes(buffer)} for a {format_bytes(payload)} payload ("
        + (f"{buffer / payload:.1f}x; " if payload else "")
        + f"{count} run{'s' * (count != 1)})"
        for (buffer, payload), count in sorted(pairs.items(), reverse=True)
    ]
    return (
        f"Ragged all-to-all ({len(rows)} instruction{'s' * (len(rows) != 1)}, "
        f"{runs} run{'s' * (runs != 1)} per step): how many rows each device "
        "sends is decided at run time by the routing. Bytes: the payload when "
        "every row of the send buffer is sent (a dropless MoE's dispatch, and "
        "its combine sending the rows back), the smaller of the send buffer and "
        "the receive buffer. Wire: (n-1)/n of it, the rows taken as spread "
        "evenly over the group. XLA sizes each receive buffer statically for "
        f"the worst case, whatever the routing: {', '.join(buffers)}."
    )

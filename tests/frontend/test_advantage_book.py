"""The book a trainer that recomputes advantages by row id reads the method's back from."""

from __future__ import annotations

import threading

import pytest

from llm_replay.frontend.advantage_book import AdvantageBook


class TrainerBook(AdvantageBook):
    noun = "sample_id"
    missing = "set the trainer's advantage step to llm-replay's"


def test_booked_advantages_come_back_by_id_until_forgotten() -> None:
    book = TrainerBook()
    book.write(["a", "b"], [0.5, -2.0])
    assert book.read(["b", "a"]) == [-2.0, 0.5]
    assert book.get(["a", "c"]) == [0.5, None]
    book.forget(["a", "never-booked"])
    with pytest.raises(KeyError, match=r"sample_id 'a'.*set the trainer's advantage step"):
        book.read(["b", "a"])


def test_a_write_with_a_value_per_id_missing_is_refused_and_books_nothing() -> None:
    book = AdvantageBook()
    with pytest.raises(ValueError, match="1 values for 2 row ids"):
        book.write(["a", "b"], [1.0])
    assert book.get(["a", "b"]) == [None, None]


def test_writers_on_several_threads_lose_no_entry() -> None:
    book = AdvantageBook()

    def write(first: int) -> None:
        for i in range(first, first + 200):
            book.write([str(i)], [float(i)])

    threads = [threading.Thread(target=write, args=(k * 200,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert book.read([str(i) for i in range(800)]) == [float(i) for i in range(800)]

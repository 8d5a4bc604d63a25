/// A first-in first-out list with O(1) removal at the front (an array and a start index,
/// compacted once most of it has been removed): device queues and the call log can hold
/// thousands of calls.
struct FIFO<Element> {
    private var storage: [Element] = []
    private var start = 0

    var count: Int { storage.count - start }
    var isEmpty: Bool { start == storage.count }
    var first: Element? { isEmpty ? nil : storage[start] }
    var elements: ArraySlice<Element> { storage[start...] }

    /// The element `offset` places from the front.
    subscript(offset: Int) -> Element {
        get { storage[start + offset] }
        set { storage[start + offset] = newValue }
    }

    mutating func append(_ element: Element) { storage.append(element) }

    @discardableResult
    mutating func popFirst() -> Element? {
        guard !isEmpty else { return nil }
        let element = storage[start]
        start += 1
        if start == storage.count {
            storage.removeAll(keepingCapacity: true)
            start = 0
        } else if start >= 64 && start * 2 >= storage.count {
            storage.removeFirst(start)
            start = 0
        }
        return element
    }

    mutating func removeAll() {
        storage.removeAll()
        start = 0
    }
}

import XCTest
final class BackendCallsPlaceholderTests: XCTestCase { func testPlaceholder() {} }

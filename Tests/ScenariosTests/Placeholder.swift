import XCTest
final class ScenariosPlaceholderTests: XCTestCase { func testPlaceholder() {} }
